"""The embedded replay: an events file through the pipeline in one process, no broker, no Redis.

Outputs in the run directory:

* ``priorities.jsonl.gz``: one priority update per applied fetch (duplicates and stale events
  are counted, not scored);
* ``rejects.jsonl``: one line per rejected event: line number, field, reason, the raw text;
* ``features.parquet``: one row per applied fetch with its features (as known right after it)
  and its label, the new internal / external outlinks at the page's next successful fetch
  (empty when no such fetch came, or the next fetch failed);
* ``summary.json``: counts and throughput.
"""

from __future__ import annotations

import gzip
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from online.events import DEFAULT_MAX_OUTLINKS, Fetch
from online.features import feature_names
from online.index import FaissIndex
from online.scoring import DEFAULT_SCORER
from streams.gcpolicy import frozen_survivors
from streams.maththreads import single_math_thread
from streams.pipeline import PagePipeline, PipelineConfig, Processed
from streams.reader import Batch, read_batches
from streams.rundir import FEATURES_FILE, PRIORITIES_FILE, REJECTS_FILE, SUMMARY_FILE
from streams.scorers import build_scorer
from streams.stores import MemoryPageStore

PARALLEL_FROM_BYTES = 4 << 20


@dataclass
class ReplaySummary:
    events_file: str
    out_dir: str
    scorer: str
    events_read: int = 0
    accepted: int = 0
    rejected: int = 0
    applied: int = 0
    duplicate: int = 0
    stale: int = 0
    dropped_outlinks: int = 0
    pages: int = 0
    indexed_pages: int = 0
    neighbour_searches: int = 0
    embedded_from_text: int = 0
    feature_rows: int = 0
    labelled_rows: int = 0
    seconds: float = 0.0
    events_per_second: float = 0.0
    rejects_by_field: dict[str, int] = field(default_factory=dict)


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
                ("crawl", pa.int32()),
                ("fetched_at", pa.timestamp("ms", tz="UTC")),
                ("status", pa.int16()),
                ("score", pa.float64()),
                ("p_new", pa.float64()),
                ("expected_new_internal", pa.float64()),
                ("expected_new_external", pa.float64()),
                *[(n, pa.float32()) for n in self.names],
                ("label_new_internal", pa.int32()),
                ("label_new_external", pa.int32()),
                ("label_interval_days", pa.float32()),
                ("label_fetched_at", pa.timestamp("ms", tz="UTC")),
            ]
        )
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")

    def add_batch(self, scored: Sequence[Processed]) -> None:
        """Scored fetches in stream order: each labels its page's pending row, then waits."""
        if not scored:
            return
        rows = np.stack([r.row for r in scored]).astype(np.float32)  # type: ignore[misc]
        slots = self._slots([r.page_id for r in scored])
        finished_meta: list[tuple] = []
        from_matrix: list[int] = []  # slots whose pre-batch row is finished
        from_batch: list[int] = []  # positions in this batch whose row is finished
        source: list[bool] = []  # per finished row: from this batch?
        in_batch: dict[int, int] = {}  # slot -> position of its latest row in this batch
        meta_list, last = self._meta, self._last
        for at, (r, slot) in enumerate(zip(scored, slots, strict=True)):
            event, priority = r.event, r.priority
            assert priority is not None
            millis = _millis(event)
            previous = meta_list[slot]
            if previous is not None:
                interval = r.emitted.interval
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
            meta_list[slot] = (
                event.url,
                r.page_id,
                event.crawl,
                millis,
                event.status,
                priority["score"],
                priority["p_new"],
                priority["expected_new_internal"],
                priority["expected_new_external"],
            )
            in_batch[slot] = at
            last[slot] = self._seq + at
        self._seq += len(scored)
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
            pa.array(cols[2], pa.int32()),
            pa.array(cols[3], pa.timestamp("ms", tz="UTC")),
            pa.array(cols[4], pa.int16()),
            pa.array(cols[5], pa.float64()),
            pa.array(cols[6], pa.float64()),
            pa.array(cols[7], pa.float64()),
            pa.array(cols[8], pa.float64()),
            *[pa.array(column, pa.float32()) for column in features],
            pa.array(cols[9], pa.int32()),
            pa.array(cols[10], pa.int32()),
            pa.array(cols[11], pa.float32()),
            pa.array(cols[12], pa.timestamp("ms", tz="UTC")),
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


def _millis(event: Fetch) -> int:
    return round(event.timestamp * 1000)


def replay(
    events_file: Path,
    out_dir: Path,
    *,
    scorer: str = DEFAULT_SCORER,
    config: PipelineConfig | None = None,
    batch_size: int = 1000,
    max_outlinks: int = DEFAULT_MAX_OUTLINKS,
    progress: bool = True,
    parallel: bool | None = None,
    batches: Iterable[Batch] | None = None,
    registry_dir: Path | None = None,
) -> ReplaySummary:
    """Replay an events file (JSON Lines, .gz allowed) in file order; write the run directory.

    ``parallel`` parses events in a second process (default: when the machine has more than
    one core and the file is larger than a few megabytes); the output is the same either way.
    ``batches`` replaces the file as the source (e.g. a topic read by `lookaround replay-topic`;
    ``events_file`` then only names it, and ``Batch.position`` counts events, not bytes).
    """
    if batches is None and parallel is None:
        parallel = (os.cpu_count() or 1) > 1 and events_file.stat().st_size > PARALLEL_FROM_BYTES
    config = config or PipelineConfig()
    out_dir.mkdir(parents=True, exist_ok=True)
    store = MemoryPageStore()
    pipeline = PagePipeline(
        store,
        FaissIndex(dim=config.embedding_dim),
        build_scorer(scorer, history=config.history, registry_dir=registry_dir),
        config,
    )
    summary = ReplaySummary(str(events_file), str(out_dir), scorer)
    table = FeatureTable(out_dir / FEATURES_FILE, config.history)
    started = time.perf_counter()
    total = events_file.stat().st_size if batches is None else None
    with (
        single_math_thread(),
        frozen_survivors() as settle,
        gzip.open(out_dir / PRIORITIES_FILE, "wb", compresslevel=1) as priorities,
        open(out_dir / REJECTS_FILE, "wb") as rejects,
        Progress(
            TextColumn("replay"),
            BarColumn(),
            TextColumn("{task.fields[events]:,} events"),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            disable=not progress,
            transient=True,
        ) as bar,
    ):
        task = bar.add_task("replay", total=total, events=0)
        if batches is None:
            batches = read_batches(
                events_file,
                batch_size=batch_size,
                embedding_dim=config.embedding_dim,
                max_outlinks=max_outlinks,
                parallel=bool(parallel),
            )
        for batch in batches:
            settle()
            summary.events_read += batch.lines
            summary.accepted += len(batch.fetches)
            summary.rejected += len(batch.rejects)
            for reject in batch.rejects:
                by_field = summary.rejects_by_field
                by_field[reject.field] = by_field.get(reject.field, 0) + 1
                rejects.write(orjson.dumps(reject.as_dict()) + b"\n")
            for fetch in batch.fetches:
                summary.dropped_outlinks += fetch.dropped_outlinks
            scored = [r for r in pipeline.process(batch.fetches) if r.priority is not None]
            lines = [orjson.dumps(r.priority) for r in scored]
            table.add_batch(scored)
            if lines:  # one compress call per batch (zlib lets other threads run meanwhile)
                priorities.write(b"\n".join(lines) + b"\n")
            bar.update(task, completed=batch.position, events=summary.events_read)
    table.close()
    counters = pipeline.counters
    summary.applied = counters.applied
    summary.duplicate = counters.duplicate
    summary.stale = counters.stale
    summary.neighbour_searches = counters.searches
    summary.embedded_from_text = counters.embedded_from_text
    summary.pages = len(store)
    summary.indexed_pages = len(pipeline.index)
    summary.feature_rows = table.rows
    summary.labelled_rows = table.labelled
    summary.seconds = round(time.perf_counter() - started, 3)
    summary.events_per_second = round(summary.events_read / max(summary.seconds, 1e-9), 1)
    (out_dir / SUMMARY_FILE).write_bytes(orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2))
    return summary


def read_priorities(out_dir: Path) -> Iterator[dict]:
    """The priority updates of a run directory, in order."""
    with gzip.open(out_dir / PRIORITIES_FILE, "rb") as fh:
        for line in fh:
            yield orjson.loads(line)
