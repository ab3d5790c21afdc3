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

from isal import igzip

from batch.helper_processes import run_as_helper
from batch.rundir import FEATURES_FILE, PRIORITIES_FILE
from online.scored import ScoredColumns
from streams.feature_table import FeatureTable
from streams.heap import HeapTrimmer, fix_mmap_threshold


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
        trimmer = HeapTrimmer()  # the held rows stay; the batches' free pages go back
        fix_mmap_threshold()  # and batch-sized arrays never in the heap (see streams.heap)
        while (batch := queue.get()) is not None:
            outputs.write(batch)
            trimmer.count(len(batch.urls))
        result.put(outputs.close())
    except BaseException:
        result.put(traceback.format_exc())
