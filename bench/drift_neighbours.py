"""Related pages on drifting embeddings: the drift threshold against searching on every change.

Generates (or reuses) a crawl whose embeddings drift a little at every fetch (``lookaround
generate --embedding-drift``), then runs the same batches through one pipeline per setting of
``drift_similarity``, in lockstep: 1 (search on every change of a page's vector, the
reference) and each threshold given. Prints, per setting, the related pages' recall@k against
the reference (after each batch, the pages it fetched: the share of the reference's related
pages the setting's list also holds, averaged over those pages), the neighbour searches, the
events per second and the CPU-seconds spent in the pipeline.

    python bench/drift_neighbours.py [--pages 10000] [--crawls 10] [--drift 0.02]
        [--thresholds 0.999 0.995 0.99 0.98 0.95] [--events FILE] [--compact-store]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from batch.generate import GeneratorConfig, write_events
from batch.reader import read_batches
from online.events import DEFAULT_LIMITS
from online.features import DEFAULT_NEIGHBOURS
from online.fetch import Fetch
from online.neighbour_search import DEFAULT_DRIFT_GROWTH
from online.pipeline import PagePipeline, PipelineConfig
from online.stores import ID_PREFIX_SHIFT, PageStore
from streams.composition import build_pipeline
from streams.maththreads import single_math_thread

THRESHOLDS = (0.999, 0.995, 0.99, 0.98, 0.95, 0.9)
#: a generated crawl's fetch times may run past this machine's clock
AHEAD_SECONDS = 20 * 365 * 86_400.0


@dataclass
class Run:
    """One setting's pipeline and what it measured."""

    threshold: float
    pipeline: PagePipeline
    wall: float = 0.0
    cpu: float = 0.0
    overlap: float = 0.0
    compared: int = 0

    @property
    def store(self) -> PageStore:
        return self.pipeline.store


def load(events: Path, batch_size: int, dim: int) -> list[list[Fetch]]:
    limits = replace(DEFAULT_LIMITS, max_ahead_seconds=AHEAD_SECONDS)
    batches = read_batches(events, batch_size=batch_size, embedding_dim=dim, limits=limits)
    return [b.fetches for b in batches if b.fetches]


def recall(reference: PageStore, other: PageStore, pages: list[int]) -> list[float]:
    """Per page with related pages in ``reference``: the share of them ``other`` lists too
    (by the ids' top bits where a list keeps only those: the compact store's)."""
    out = []
    for ref, got in zip(reference.get_neighbours(pages), other.get_neighbours(pages), strict=True):
        if ref is None or not len(ref.ids):
            continue
        if got is None:
            out.append(0.0)
            continue
        shift = ID_PREFIX_SHIFT if ref.short_ids or got.short_ids else 0
        found = len(np.intersect1d(ref.ids >> shift, got.ids >> shift))
        out.append(found / len(ref.ids))
    return out


def measure(
    batches: list[list[Fetch]],
    thresholds: list[float],
    dim: int,
    scorer: str,
    k: int,
    drift_growth: float,
    compact: bool = False,
) -> list[Run]:
    runs = [
        Run(
            t,
            build_pipeline(
                scorer,
                PipelineConfig(
                    embedding_dim=dim,
                    neighbours=k,
                    drift_similarity=t,
                    drift_growth=drift_growth,
                    compact_store=compact,
                ),
                refresh=False,
            ),
        )
        for t in [1.0, *thresholds]
    ]
    with single_math_thread():
        for fetches in batches:
            for run in runs:
                wall, cpu = time.perf_counter(), time.process_time()
                run.pipeline.process_batch(fetches)
                run.cpu += time.process_time() - cpu
                run.wall += time.perf_counter() - wall
            pages = list(dict.fromkeys(f.page_id for f in fetches))
            for run in runs:
                shares = recall(runs[0].store, run.store, pages)
                run.overlap += sum(shares)
                run.compared += len(shares)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--crawls", type=int, default=10)
    parser.add_argument("--drift", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--embedding-dim", type=int, default=192)
    parser.add_argument("--thresholds", type=float, nargs="+", default=list(THRESHOLDS))
    parser.add_argument("--events", type=Path, help="reuse this events file")
    parser.add_argument("--scorer", default="lbla")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--neighbours", type=int, default=DEFAULT_NEIGHBOURS)
    parser.add_argument(
        "--drift-growth",
        type=float,
        default=DEFAULT_DRIFT_GROWTH,
        help="index growth that sends a changed page's search again (2: recompute_growth's)",
    )
    parser.add_argument(
        "--compact-store",
        action="store_true",
        help="as the compact store keeps them: weights a byte, the direction projected, 4 bits",
    )
    args = parser.parse_args()
    events = args.events
    if events is None:
        events = Path(tempfile.mkdtemp(prefix="lookaround-bench-")) / "crawl.jsonl.gz"
        config = GeneratorConfig(
            pages=args.pages,
            crawls=args.crawls,
            seed=args.seed,
            embedding_dim=args.embedding_dim,
            embedding_drift=args.drift,
        )
        write_events(events, config, progress=False)
        print(f"generated {events}: {args.pages} pages x {args.crawls} crawls, drift {args.drift}")
    batches = load(events, args.batch_size, args.embedding_dim)
    n_events = sum(len(b) for b in batches)
    runs = measure(
        batches,
        args.thresholds,
        args.embedding_dim,
        args.scorer,
        args.neighbours,
        args.drift_growth,
        args.compact_store,
    )
    k = args.neighbours
    print(
        f"{n_events:,} events, batches of {args.batch_size}, scorer {args.scorer}, "
        f"drift_growth {args.drift_growth:g}" + (", compact store" if args.compact_store else "")
    )
    print(f"| drift_similarity | recall@{k} | searches | events/s | CPU-seconds |")
    print("|---|---|---|---|---|")
    for run in runs:
        name = "1 (every change)" if run.threshold >= 1.0 else f"{run.threshold:g}"
        share = run.overlap / max(run.compared, 1)
        print(
            f"| {name} | {share:.4f} | {run.pipeline.counters.searches:,} | "
            f"{n_events / run.wall:,.0f} | {run.cpu:.1f} |"
        )


if __name__ == "__main__":
    main()
