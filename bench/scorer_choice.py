"""Which scorer should be the default? Yield@10% on held-out crawls, every scorer.

See `streams.scorer_choice` for the procedure. Prints the table, the best scorer and the online
learner's share of the batch model's yield.

    python bench/scorer_choice.py --pages 10000 --crawls 10
    python bench/scorer_choice.py --events ../shared/data/S/crawls.jsonl.gz --holdout-crawls 5
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from batch.generate import GeneratorConfig, write_events
from streams.scorer_choice import compare_scorers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=Path)
    ap.add_argument("--pages", type=int, default=10_000)
    ap.add_argument("--crawls", type=int, default=10)
    ap.add_argument("--holdout-crawls", type=int, default=4)
    ap.add_argument("--kind", default="extratrees")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="scorer-choice-"))
    events = args.events
    if events is None:
        events = out / "crawl.jsonl.gz"
        write_events(events, GeneratorConfig(pages=args.pages, crawls=args.crawls, seed=7))
    started = time.perf_counter()
    frame, facts = compare_scorers(events, out, holdout_crawls=args.holdout_crawls, kind=args.kind)
    print(
        f"batch model {facts['model']} ({facts['kind']}) trained on {facts['train_rows']:,} "
        f"rows; held-out crawls {facts['held_out_crawls']} ({facts['held_out_rows']:,} rows)"
    )
    print(frame.round(4).to_string())
    best = frame.drop(index=["oracle"], errors="ignore")["yield@10%"].idxmax()
    ratio = frame.loc["online", "yield@10%"] / frame.loc["batch", "yield@10%"]
    print(f"best by held-out yield@10%: {best}; online / batch yield: {ratio:.3f}")
    print(f"({time.perf_counter() - started:.0f} s; runs in {out})")


if __name__ == "__main__":
    main()
