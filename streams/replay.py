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
from collections.abc import Iterable, Iterator
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
    """Feature rows waiting for their labels, then written to Parquet in row groups."""

    def __init__(self, path: Path, history: int, row_group: int = 50_000) -> None:
        self.names = feature_names(history)
        self.path = path
        self.row_group = row_group
        self.pending: dict[int, tuple] = {}
        self.done: list[tuple] = []
        self.rows = 0
        self.labelled = 0
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

    def add(self, r: Processed) -> None:
        assert r.row is not None and r.priority is not None
        previous = self.pending.pop(r.page_id, None)
        if previous is not None:
            interval = r.emitted.interval
            if interval is not None:
                label = (interval.new_internal, interval.new_external, interval.days)
                self.labelled += 1
            else:
                label = (None, None, None)
            self._finish(previous, (*label, _millis(r.event)))
        self.pending[r.page_id] = (
            r.event.url,
            r.page_id,
            r.event.crawl,
            _millis(r.event),
            r.event.status,
            r.priority["score"],
            r.priority["p_new"],
            r.priority["expected_new_internal"],
            r.priority["expected_new_external"],
            r.row.astype(np.float32),
        )

    def _finish(self, row: tuple, label: tuple) -> None:
        self.done.append((*row, *label))
        self.rows += 1
        if len(self.done) >= self.row_group:
            self._flush()

    def _flush(self) -> None:
        if not self.done:
            return
        cols = list(zip(*self.done, strict=True))
        matrix = np.stack(cols[9])
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
            *[pa.array(matrix[:, j], pa.float32()) for j in range(len(self.names))],
            pa.array(cols[10], pa.int32()),
            pa.array(cols[11], pa.int32()),
            pa.array(cols[12], pa.float32()),
            pa.array(cols[13], pa.timestamp("ms", tz="UTC")),
        ]
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
        self.done.clear()

    def close(self) -> None:
        for row in self.pending.values():
            self._finish(row, (None, None, None, None))
        self.pending.clear()
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
            lines = []
            for r in pipeline.process(batch.fetches):
                if r.priority is not None:
                    lines.append(orjson.dumps(r.priority))
                    table.add(r)
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
