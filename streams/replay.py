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

import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson
from isal import igzip
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from online.events import DEFAULT_MAX_OUTLINKS
from online.index import FaissIndex
from online.scoring import DEFAULT_SCORER
from streams.gcpolicy import frozen_survivors
from streams.maththreads import single_math_thread
from streams.pipeline import PagePipeline, PipelineConfig
from streams.reader import Batch, read_batches
from streams.run_outputs import RunOutputs
from streams.rundir import PRIORITIES_FILE, REJECTS_FILE, SUMMARY_FILE
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

    ``parallel`` parses events in a second process and writes priorities and feature rows in a
    third (default: when the machine has more than one core and the file is larger than a few
    megabytes); the output is the same either way.
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
    started = time.perf_counter()
    outputs = RunOutputs(out_dir, config.history, parallel=bool(parallel))
    total = events_file.stat().st_size if batches is None else None
    with (
        single_math_thread(),
        frozen_survivors() as settle,
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
        try:
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
                for columns in pipeline.process_batch(batch.fetches).scored:
                    outputs.write(columns)
                bar.update(task, completed=batch.position, events=summary.events_read)
        except BaseException:
            outputs.abort()  # no half-written files from a writer left running
            raise
        summary.feature_rows, summary.labelled_rows = outputs.close()
    counters = pipeline.counters
    summary.applied = counters.applied
    summary.duplicate = counters.duplicate
    summary.stale = counters.stale
    summary.neighbour_searches = counters.searches
    summary.embedded_from_text = counters.embedded_from_text
    summary.pages = len(store)
    summary.indexed_pages = len(pipeline.index)
    summary.seconds = round(time.perf_counter() - started, 3)
    summary.events_per_second = round(summary.events_read / max(summary.seconds, 1e-9), 1)
    (out_dir / SUMMARY_FILE).write_bytes(orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2))
    return summary


def read_priorities(out_dir: Path) -> Iterator[dict]:
    """The priority updates of a run directory, in order."""
    with igzip.open(out_dir / PRIORITIES_FILE, "rb") as fh:
        for line in fh:
            yield orjson.loads(line)
