"""What the compact store changes in the published priorities.

The pipeline makes what it stores compact where it makes it (``PipelineConfig.compact_store``:
stats, related-page weights and the look-around part of feature rows in half precision,
sizes in float32; the direction related pages were found with in 4 bits a dimension, allowed
for by its cosine). This replays the same crawl with and without, per scorer, and compares
each event's priority update: the score's relative change (median, 99th percentile, max over
the updates whose scores differ at all), the share of updates whose score or next fetch time
changed at all, and the neighbour searches each made.

    python bench/store_precision.py [--pages 5000] [--crawls 5] [--drift 0.05]
        [--scorers lbla ensemble] [--events FILE]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from batch.generate import GeneratorConfig, write_events
from online.pipeline import PipelineConfig
from streams.replay import read_priorities, replay


def compare(full: list[dict], compact: list[dict]) -> dict:
    """The score's relative change between two runs' priority updates, event by event."""
    if len(full) != len(compact):
        raise ValueError(f"{len(full)} against {len(compact)} priority updates")
    a = np.array([p["score"] for p in full], dtype=np.float64)
    b = np.array([p["score"] for p in compact], dtype=np.float64)
    scale = np.maximum(np.abs(a), np.abs(b))
    rel = np.divide(np.abs(a - b), scale, out=np.zeros_like(a), where=scale > 0)
    changed = rel > 0
    moved = sum(
        p["next_fetch_at"] != q["next_fetch_at"] for p, q in zip(full, compact, strict=True)
    )
    quantiles = np.quantile(rel[changed], [0.5, 0.99]) if changed.any() else np.zeros(2)
    return {
        "updates": len(a),
        "score_changed_share": round(float(changed.mean()), 4),
        "next_fetch_changed_share": round(moved / max(len(a), 1), 4),
        "rel_change_median_of_changed": float(f"{quantiles[0]:.3g}"),
        "rel_change_p99_of_changed": float(f"{quantiles[1]:.3g}"),
        "rel_change_max": float(f"{rel.max():.3g}") if len(rel) else 0.0,
        "rel_change_median_all": float(f"{np.median(rel):.3g}") if len(rel) else 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pages", type=int, default=5000)
    ap.add_argument("--crawls", type=int, default=5)
    ap.add_argument("--drift", type=float, default=0.05, help="embedding drift a fetch")
    ap.add_argument("--scorers", nargs="+", default=["lbla", "ensemble"])
    ap.add_argument("--events", type=Path, default=None, help="a crawl to reuse")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lookaround-precision-"))
    events = args.events
    if events is None:
        events = tmp / "crawl.jsonl.gz"
        config = GeneratorConfig(
            pages=args.pages, crawls=args.crawls, seed=5, content="both", embedding_drift=args.drift
        )
        write_events(events, config, progress=False)
    print(f"{'scorer':>9} {'updates':>8} {'changed':>8} {'median':>9} {'p99':>9} {'max':>9}"
          f" {'next fetch':>10} {'searches':>17}")  # fmt: skip
    for scorer in args.scorers:
        runs = {}
        searches = {}
        for compact in (False, True):
            out = tmp / f"{scorer}-{'compact' if compact else 'full'}"
            summary = replay(
                events,
                out,
                scorer=scorer,
                config=PipelineConfig(compact_store=compact),
                progress=False,
                parallel=False,
            )
            runs[compact] = list(read_priorities(out))
            searches[compact] = summary.neighbour_searches
        c = compare(runs[False], runs[True])
        print(
            f"{scorer:>9} {c['updates']:>8,} {c['score_changed_share']:>8.2%}"
            f" {c['rel_change_median_of_changed']:>9.2g} {c['rel_change_p99_of_changed']:>9.2g}"
            f" {c['rel_change_max']:>9.2g} {c['next_fetch_changed_share']:>10.2%}"
            f" {searches[False]:>8,} {searches[True]:>8,}"
        )


if __name__ == "__main__":
    main()
