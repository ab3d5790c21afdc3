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
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson
from isal import igzip
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from batch.reader import DEFAULT_BATCH_SIZE, Batch, Reject, read_batches
from batch.rundir import (
    FEATURES_FILE,
    MODELS_DIR,
    PRIORITIES_FILE,
    REJECTS_FILE,
    RELATED_FILE,
    SUMMARY_FILE,
)
from online.events import DEFAULT_LIMITS, DEFAULT_MAX_OUTLINKS, EventLimits
from online.pipeline import PagePipeline, PipelineConfig
from online.scorers import DEFAULT_SCORER
from streams.composition import build_pipeline
from streams.gcpolicy import frozen_survivors
from streams.heap import HeapTrimmer, fix_mmap_threshold
from streams.maththreads import single_math_thread
from streams.run_outputs import RunOutputs

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
    #: the related-page index's IVF lists at the end, and how many a search probes (0: the
    #: search is exact; `online.index.FaissIndex`)
    index_lists: int = 0
    index_probes: int = 0
    #: IVF upserts that kept their page's list without ranking the centroids, and of those
    #: the ones that took it from a search of their vector (`online.index.FaissIndex`)
    index_lists_kept: int = 0
    index_lists_from_search: int = 0
    neighbour_searches: int = 0
    #: of those, searched again wider (see `online.neighbour_search`)
    neighbour_searches_widened: int = 0
    embedded_from_text: int = 0
    feature_rows: int = 0
    labelled_rows: int = 0
    seconds: float = 0.0
    events_per_second: float = 0.0
    rejects_by_field: dict[str, int] = field(default_factory=dict)
    #: online-learner steps skipped because they would have made its weights non-finite
    learner_steps_skipped: int = 0
    #: priorities with a NaN or infinite value replaced (a last line of defence: expected 0)
    nonfinite_scores: int = 0
    #: related updates published for the siblings of pages that showed new links
    #: (`online.related_updates`; in ``related.jsonl.gz``)
    related_updates: int = 0
    #: a learned scorer's weight per candidate at the end of the run
    candidate_weights: dict[str, float] = field(default_factory=dict)
    #: the batch model versions a learned scorer refreshed to
    batch_models: list[str] = field(default_factory=list)
    #: refreshes of the batch model that failed (logged; the model before went on scoring)
    batch_model_failures: int = 0
    #: a learned scorer's ranking option, from which epoch (its epochs learn the labels)
    ranking_choices: list[tuple[int, str]] = field(default_factory=list)
    #: each ranking option's mean measured quality (yield over budgets + Spearman) per epoch
    ranking_quality: dict[str, float] = field(default_factory=dict)


def replay(
    events_file: Path,
    out_dir: Path,
    *,
    scorer: str = DEFAULT_SCORER,
    config: PipelineConfig | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_outlinks: int = DEFAULT_MAX_OUTLINKS,
    limits: EventLimits = DEFAULT_LIMITS,
    progress: bool = True,
    parallel: bool | None = None,
    batches: Iterable[Batch] | None = None,
    registry_dir: Path | None = None,
    refresh: bool = True,
) -> ReplaySummary:
    """Replay an events file (JSON Lines, .gz allowed) in file order; write the run directory.

    ``refresh``: the learned scorers refit their batch model as the stream goes on (each
    version registered under ``out_dir/models``). ``parallel`` parses events in a second
    process and writes priorities and feature rows in a third (default: when the machine has
    more than one core and the file is larger than a few megabytes); the output is the same
    either way.
    ``batches`` replaces the file as the source (e.g. a topic read by `lookaround replay-topic`;
    ``events_file`` then only names it, and ``Batch.position`` counts events, not bytes).
    """
    if batches is None and parallel is None:
        parallel = (os.cpu_count() or 1) > 1 and events_file.stat().st_size > PARALLEL_FROM_BYTES
    config = config or PipelineConfig()
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove_outputs(out_dir)  # a previous run's files must not pass for this one's
    pipeline = build_pipeline(
        scorer,
        config,
        registry_dir=registry_dir,
        refresh=refresh,
        refresh_registry=out_dir / MODELS_DIR,
    )
    store = pipeline.store
    summary = ReplaySummary(str(events_file), str(out_dir), scorer)
    started = time.perf_counter()
    outputs = RunOutputs(out_dir, config.history, parallel=bool(parallel))
    total = events_file.stat().st_size if batches is None else None
    trimmer = HeapTrimmer()  # the free pages between the page records back to the system
    fix_mmap_threshold()  # and batch-sized arrays never in the heap (see streams.heap)
    with (
        single_math_thread(),
        frozen_survivors() as settle,
        open(out_dir / REJECTS_FILE, "wb") as rejects,
        igzip.open(out_dir / RELATED_FILE, "wb") as related,
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
                    limits=limits,
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
                isolated = pipeline.process_isolated(batch.fetches)
                for at, error in isolated.failed:
                    _count_failed(summary, rejects, batch, at, error)
                for columns in isolated.outcome.scored:
                    outputs.write(columns)
                for update in isolated.outcome.related:
                    related.write(orjson.dumps(update) + b"\n")
                summary.related_updates += len(isolated.outcome.related)
                bar.update(task, completed=batch.position, events=summary.events_read)
                trimmer.count(batch.lines)
        except BaseException:
            outputs.abort()  # no half-written files from a writer left running
            rejects.close()
            related.close()
            _remove_outputs(out_dir)  # nor a partial run passing for a whole one
            raise
        summary.feature_rows, summary.labelled_rows = outputs.close()
    counters = pipeline.counters
    summary.applied = counters.applied
    summary.duplicate = counters.duplicate
    summary.stale = counters.stale
    summary.neighbour_searches = counters.searches
    summary.neighbour_searches_widened = counters.searches_widened
    summary.embedded_from_text = counters.embedded_from_text
    summary.nonfinite_scores = counters.nonfinite_scores
    summary.learner_steps_skipped = learner_steps_skipped(pipeline)
    learned = pipeline.scorer
    if hasattr(learned, "weights"):
        summary.candidate_weights = {k: round(v, 4) for k, v in learned.weights().items()}
        summary.ranking_choices = list(learned.state().choices)
        summary.ranking_quality = {
            name: round(float(sum(values) / len(values)), 4)
            for name, values in learned.state().measured.items()
            if values
        }
    refresher = getattr(learned, "refresher", None)
    if refresher is not None:
        summary.batch_models = list(refresher.versions)
        summary.batch_model_failures = refresher.failures
    summary.pages = len(store)
    summary.indexed_pages = len(pipeline.index)
    summary.index_lists = int(getattr(pipeline.index, "lists", 0))
    summary.index_probes = int(getattr(pipeline.index, "probes", 0))
    summary.index_lists_kept = int(getattr(pipeline.index, "lists_kept", 0))
    summary.index_lists_from_search = int(getattr(pipeline.index, "lists_from_search", 0))
    summary.seconds = round(time.perf_counter() - started, 3)
    summary.events_per_second = round(summary.events_read / max(summary.seconds, 1e-9), 1)
    (out_dir / SUMMARY_FILE).write_bytes(orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2))
    return summary


#: The rejects file's field for an event that passed validation but whose processing raised.
PROCESSING_FIELD = "processing"


def _count_failed(
    summary: ReplaySummary, rejects: BinaryIO, batch: Batch, at: int, error: str
) -> None:
    """An event whose processing raised: counted as rejected, not accepted, and written to
    the rejects file with its line number (or topic offset) and the error."""
    fetch = batch.fetches[at]
    line = batch.numbers[at] if at < len(batch.numbers) else 0
    summary.accepted -= 1
    summary.rejected += 1
    by_field = summary.rejects_by_field
    by_field[PROCESSING_FIELD] = by_field.get(PROCESSING_FIELD, 0) + 1
    reject = Reject(line, PROCESSING_FIELD, f"processing failed: {error}", fetch.url)
    rejects.write(orjson.dumps(reject.as_dict()) + b"\n")


def learner_steps_skipped(pipeline: PagePipeline) -> int:
    """Steps the pipeline's online learner skipped to keep its weights finite (0 without one)."""
    if not pipeline.learns:
        return 0
    learner = getattr(pipeline.scorer.state(), "learner", None)  # type: ignore[attr-defined]
    return int(getattr(learner, "n_skipped", 0))


def _remove_outputs(out_dir: Path) -> None:
    for name in (PRIORITIES_FILE, FEATURES_FILE, REJECTS_FILE, RELATED_FILE, SUMMARY_FILE):
        (out_dir / name).unlink(missing_ok=True)
    shutil.rmtree(out_dir / MODELS_DIR, ignore_errors=True)


def nothing_accepted(summary: ReplaySummary) -> str | None:
    """Why a finished replay is no use, or None: no events at all, or every one rejected."""
    source = summary.events_file
    if summary.events_read == 0:
        return f"{source} has no events (no line that is not blank)"
    if summary.accepted == 0:
        field, count = max(summary.rejects_by_field.items(), key=lambda item: item[1])
        return (
            f"none of the {summary.events_read:,} events of {source} was accepted ({count:,} "
            f"rejected on {field!r}; reasons in {Path(summary.out_dir) / REJECTS_FILE}): is it "
            "a JSON Lines file of fetched-page events?"
        )
    return None


def read_priorities(out_dir: Path) -> Iterator[dict]:
    """The priority updates of a run directory, in order."""
    with igzip.open(out_dir / PRIORITIES_FILE, "rb") as fh:
        for line in fh:
            yield orjson.loads(line)


def read_related(out_dir: Path) -> Iterator[dict]:
    """The related-page updates of a run directory, in order (none for a run made before
    they existed)."""
    path = out_dir / RELATED_FILE
    if not path.exists():
        return
    with igzip.open(path, "rb") as fh:
        for line in fh:
            yield orjson.loads(line)
