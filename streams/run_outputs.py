"""The replay's two large outputs, priorities and feature rows, written in stream order,
in a writer process when the replay runs in parallel.

Turning a million scored fetches into gzip'd JSON Lines and labelled Parquet rows is per-row
work that needs nothing of the pipeline's state; in the main process it took an eighth of the
replay's time, on the core the pipeline needs. The main process now hands over each batch as
its columns (`ScoredColumns`, cheap to pickle) and the writer does the rest, the priority
dicts and their JSON included. The files are
the same either way: one writer, one queue, batches in order.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from isal import igzip

from batch.helper_processes import run_as_helper
from batch.rundir import FEATURES_FILE, PRIORITIES_FILE
from online.candidates import CANDIDATES
from online.features import feature_names
from online.scored import ScoredColumns

_K = len(CANDIDATES)
_NO_CANDIDATES = (None,) * _K


def candidate_column(name: str) -> str:
    """The features.parquet column of a candidate's rate per day (learned scorers only)."""
    return f"candidate_{name.replace('-', '_')}"


def _candidate_rows(batch: ScoredColumns) -> list[tuple]:
    """Per row, each candidate's rate per day (None where not recorded or abstaining)."""
    if not batch.candidates:
        return [_NO_CANDIDATES] * len(batch)
    table = np.column_stack(
        [batch.candidates.get(name, np.full(len(batch), np.nan)) for name in CANDIDATES]
    ).astype(np.float64)
    values = np.where(np.isnan(table), None, table)
    return [tuple(row) for row in values.tolist()]


class FeatureTable:
    """Feature rows waiting for their labels, then written to Parquet in row groups.

    A page's pending row sits in a slot of one float32 matrix and a list of its other values,
    so a batch moves rows with a few array gathers instead of one tuple and one small array
    per fetch. Rows are written in the order their labels arrive, the rest at `close` in the
    order their pages were last fetched.
    """

    def __init__(self, path: Path, history: int, row_group: int = 50_000) -> None:
        self.names = feature_names(history)
        self.path = path
        self.row_group = row_group
        self.rows = 0
        self.labelled = 0
        self._slot: dict[int, int] = {}  # page id -> slot
        self._meta: list[tuple | None] = []  # slot -> the pending row's values but features
        self._last: list[int] = []  # slot -> sequence number of the page's latest fetch
        self._matrix = np.empty((0, len(self.names)), dtype=np.float32)
        self._seq = 0
        self._done_meta: list[tuple] = []
        self._done_rows: list[np.ndarray] = []
        self.schema = pa.schema(
            [
                ("url", pa.string()),
                ("page_id", pa.int64()),
                ("crawl", pa.int64()),  # any 64-bit crawl round the contract accepts
                ("fetched_at", pa.timestamp("ms", tz="UTC")),
                ("status", pa.int16()),
                ("score", pa.float64()),
                ("p_new", pa.float64()),
                ("expected_new_internal", pa.float64()),
                ("expected_new_external", pa.float64()),
                *[(n, pa.float32()) for n in self.names],
                *[(candidate_column(n), pa.float32()) for n in CANDIDATES],
                ("label_new_internal", pa.int32()),
                ("label_new_external", pa.int32()),
                ("label_interval_days", pa.float32()),
                ("label_fetched_at", pa.timestamp("ms", tz="UTC")),
            ]
        )
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")

    def add_batch(self, batch: ScoredColumns) -> None:
        """Scored fetches in stream order: each labels its page's pending row, then waits."""
        if not len(batch):
            return
        rows = batch.matrix.astype(np.float32)
        slots = self._slots(batch.page_ids)
        finished_meta: list[tuple] = []
        from_matrix: list[int] = []  # slots whose pre-batch row is finished
        from_batch: list[int] = []  # positions in this batch whose row is finished
        source: list[bool] = []  # per finished row: from this batch?
        in_batch: dict[int, int] = {}  # slot -> position of its latest row in this batch
        meta_list, last = self._meta, self._last
        candidates = _candidate_rows(batch)
        columns = zip(
            slots,
            batch.urls,
            batch.page_ids,
            batch.crawls,
            batch.timestamps,
            batch.statuses,
            batch.values,
            batch.intervals,
            candidates,
            strict=True,
        )
        for at, (slot, url, page_id, crawl, ts, status, values, interval, cands) in enumerate(
            columns
        ):
            millis = round(ts * 1000)
            previous = meta_list[slot]
            if previous is not None:
                if interval is not None:
                    label = (interval.new_internal, interval.new_external, interval.days, millis)
                    self.labelled += 1
                else:
                    label = (None, None, None, millis)
                finished_meta.append(previous + label)
                position = in_batch.get(slot)
                source.append(position is not None)
                if position is None:
                    from_matrix.append(slot)
                else:
                    from_batch.append(position)
            score, internal, external, p_new = values[:4]
            meta_list[slot] = (
                url,
                page_id,
                crawl,
                millis,
                status,
                score,
                p_new,
                internal,
                external,
                *cands,
            )
            in_batch[slot] = at
            last[slot] = self._seq + at
        self._seq += len(slots)
        if finished_meta:
            block = np.empty((len(finished_meta), rows.shape[1]), dtype=np.float32)
            from_this_batch = np.array(source, dtype=bool)
            block[~from_this_batch] = self._matrix[from_matrix]
            block[from_this_batch] = rows[from_batch]
            self._finish(finished_meta, block)
        latest = np.fromiter(in_batch.values(), np.int64, len(in_batch))
        self._matrix[np.fromiter(in_batch, np.int64, len(in_batch))] = rows[latest]

    def _slots(self, page_ids: list[int]) -> list[int]:
        slot_of = self._slot
        slots = []
        for pid in page_ids:
            slot = slot_of.get(pid)
            if slot is None:
                slot = slot_of[pid] = len(self._meta)
                self._meta.append(None)
                self._last.append(-1)
            slots.append(slot)
        if len(self._meta) > len(self._matrix):  # grow by doubling
            size = max(2 * len(self._matrix), len(self._meta), 1024)
            grown = np.empty((size, len(self.names)), dtype=np.float32)
            grown[: len(self._matrix)] = self._matrix
            self._matrix = grown
        return slots

    def _finish(self, meta: list[tuple], rows: np.ndarray) -> None:
        self._done_meta.extend(meta)
        self._done_rows.append(rows)
        self.rows += len(meta)
        if len(self._done_meta) >= self.row_group:
            self._flush()

    def _flush(self) -> None:
        if not self._done_meta:
            return
        cols = list(zip(*self._done_meta, strict=True))
        # Column-major first: pyarrow copies a strided column element by element, 20x slower.
        features = np.ascontiguousarray(np.concatenate(self._done_rows).T)
        arrays = [
            pa.array(cols[0], pa.string()),
            pa.array(cols[1], pa.int64()),
            pa.array(cols[2], pa.int64()),
            pa.array(cols[3], pa.timestamp("ms", tz="UTC")),
            pa.array(cols[4], pa.int16()),
            pa.array(cols[5], pa.float64()),
            pa.array(cols[6], pa.float64()),
            pa.array(cols[7], pa.float64()),
            pa.array(cols[8], pa.float64()),
            *[pa.array(column, pa.float32()) for column in features],
            *[pa.array(cols[9 + j], pa.float32()) for j in range(_K)],
            pa.array(cols[9 + _K], pa.int32()),
            pa.array(cols[10 + _K], pa.int32()),
            pa.array(cols[11 + _K], pa.float32()),
            pa.array(cols[12 + _K], pa.timestamp("ms", tz="UTC")),
        ]
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
        self._done_meta.clear()
        self._done_rows.clear()

    def close(self) -> None:
        waiting = [s for s, meta in enumerate(self._meta) if meta is not None]
        waiting.sort(key=self._last.__getitem__)
        for lo in range(0, len(waiting), self.row_group):
            part = waiting[lo : lo + self.row_group]
            meta = [self._meta[s] + (None, None, None, None) for s in part]  # type: ignore[operator]
            self._finish(meta, self._matrix[part])
        self._meta = [None] * len(self._meta)
        self._flush()
        self.writer.close()


class _Outputs:
    """priorities.jsonl.gz and features.parquet of one run, written here."""

    def __init__(self, out_dir: Path, history: int) -> None:
        self.table = FeatureTable(out_dir / FEATURES_FILE, history)
        self.priorities = igzip.open(out_dir / PRIORITIES_FILE, "wb", compresslevel=1)

    def write(self, batch: ScoredColumns) -> None:
        self.table.add_batch(batch)
        if len(batch):  # one compress call per batch
            self.priorities.write(batch.priority_lines())

    def close(self) -> tuple[int, int]:
        self.priorities.close()
        self.table.close()
        return self.table.rows, self.table.labelled


_POLL_SECONDS = 1.0


class RunOutputs:
    """Writes a run's priorities and feature rows, batch by batch in order; in a writer process
    when ``parallel`` (the main process only pickles a few columns per batch).

    `close` returns (feature rows written, of which labelled) once everything is on disk, and
    raises if the writer failed.
    """

    def __init__(self, out_dir: Path, history: int, *, parallel: bool = False) -> None:
        self._local: _Outputs | None = None
        self._process: Any = None
        if not parallel:
            self._local = _Outputs(out_dir, history)
            return
        ctx = mp.get_context("spawn")
        self._queue: mp.Queue = ctx.Queue(maxsize=8)
        self._result: mp.Queue = ctx.Queue(maxsize=1)
        self._process = ctx.Process(
            target=_serve,
            args=(self._queue, self._result, os.getpid(), out_dir, history),
            daemon=True,
            name="run-writer",
        )
        self._process.start()

    def write(self, batch: ScoredColumns) -> None:
        if self._local is not None:
            self._local.write(batch)
        else:
            self._put(batch)

    def close(self) -> tuple[int, int]:
        if self._local is not None:
            return self._local.close()
        self._put(None)
        while True:
            try:
                result = self._result.get(timeout=_POLL_SECONDS)
                break
            except queue.Empty:
                if not self._process.is_alive():
                    self._fail()
        self._process.join()
        if not isinstance(result, tuple):
            self._fail(result)
        return result

    def _put(self, item: ScoredColumns | None) -> None:
        """Hand over an item; a writer that died (full queue or not) is reported, not awaited."""
        while True:
            if not self._process.is_alive():
                self._fail()
            try:
                self._queue.put(item, timeout=_POLL_SECONDS)
                return
            except queue.Full:
                continue

    def abort(self) -> None:
        """Stop the writer without finishing the files (the run failed)."""
        if self._process is not None and self._process.is_alive():
            self._process.terminate()
            self._process.join()

    def _fail(self, detail: object = None) -> None:
        if detail is None:  # the writer's own report, if it managed to send one
            try:
                detail = self._result.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                detail = f"the writer process exited with code {self._process.exitcode}"
        self.abort()
        raise RuntimeError(f"run writer failed:\n{detail}")


def _serve(queue: mp.Queue, result: mp.Queue, parent_pid: int, out_dir: Path, history: int) -> None:
    run_as_helper(parent_pid)
    try:
        outputs = _Outputs(out_dir, history)
        while (batch := queue.get()) is not None:
            outputs.write(batch)
        result.put(outputs.close())
    except BaseException:
        result.put(traceback.format_exc())
