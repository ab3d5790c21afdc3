"""Online learners: score + learn throughput per learner kind, in stream order.

Replays a generated crawl once (or takes --run), then feeds its feature rows through a
`StreamLearner` exactly as the pipeline does (each row scored, each label learned when the
page's next fetch arrives) and prints events/s per kind.

    python bench/online_learners.py --pages 5000 --crawls 6
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from batch.evaluate import load_rows
from batch.generate import GeneratorConfig, write_events
from online.features import feature_names
from online.learners import KINDS, Label, LinkLearner, StreamLearner
from streams.replay import replay


def rows_in_stream_order(run: Path, limit: int):
    """The run's rows in fetch order from its second crawl on (where labels arrive)."""
    df = load_rows(run).sort_values("fetched_at", kind="stable").reset_index(drop=True)
    names = [n for n in feature_names(8) if n in df.columns]
    X = df[names].to_numpy(np.float64)
    at = df["fetched_at"].astype("int64").to_numpy()
    label_at = df["label_fetched_at"].astype("int64").to_numpy()
    pid = df["page_id"].to_numpy()
    by_label = {(p, t): i for i, (p, t) in enumerate(zip(pid, label_at, strict=True))}
    li, le = df["label_new_internal"].to_numpy(), df["label_new_external"].to_numpy()
    days = df["label_interval_days"].to_numpy()
    previous, labels = [], []
    for i in range(len(df)):
        j = by_label.get((pid[i], at[i]))
        if j is None or np.isnan(li[j]):
            previous.append(None)
            labels.append(None)
        else:
            previous.append(X[j])
            labels.append(Label(int(li[j]), int(le[j]), float(days[j])))
    start = int(np.flatnonzero(df["crawl"].to_numpy() >= 1)[0])
    end = start + limit
    return names, X[start:end], previous[start:end], labels[start:end]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="a replay run directory (default: generate one)")
    ap.add_argument("--pages", type=int, default=5000)
    ap.add_argument("--crawls", type=int, default=6)
    ap.add_argument("--rows", type=int, default=30_000, help="rows for the fast kinds")
    ap.add_argument("--slow-rows", type=int, default=2_000, help="rows for arf")
    ap.add_argument("--batch", type=int, default=500, help="pipeline micro-batch")
    args = ap.parse_args()
    run = args.run
    if run is None:
        tmp = Path(tempfile.mkdtemp())
        events = tmp / "crawl.jsonl.gz"
        write_events(events, GeneratorConfig(pages=args.pages, crawls=args.crawls, seed=1))
        run = tmp / "run"
        replay(events, run, progress=False)
    names, X, previous, labels = rows_in_stream_order(run, args.rows)
    print(f"{len(X):,} rows, {len(names)} features, micro-batch {args.batch}")
    for kind in KINDS:
        n = args.slow_rows if kind == "arf" else len(X)
        learner = StreamLearner(names, LinkLearner(kind=kind, n_models=10), learn_every=64)
        started = time.perf_counter()
        for lo in range(0, n, args.batch):
            hi = min(lo + args.batch, n)
            learner.score_and_learn(X[lo:hi], previous[lo:hi], labels[lo:hi])
        seconds = time.perf_counter() - started
        print(
            f"{kind:10s} {n:7,} events  {n / seconds:9,.0f} events/s (score + learn)"
            f"  learned {learner.n_learned:,}"
        )


if __name__ == "__main__":
    main()
