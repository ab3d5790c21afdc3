"""Closed-loop simulation speed: S-timeline (24 weeks, 2,412 pages at the start) at 5% of the
index a day, every policy (floor: under 60 s in all, on the 2-core development machine).

Reads the timeline once (not timed in the floor, printed apart), then runs the six policies as
``lookaround simulate`` does, and prints each crawl's time, the pipeline's share and the ratio
to the floor. The machine's load average is printed with it: compare figures taken when it is
quiet.

    python bench/simulate_speed.py [--timeline PATH] [--budget 5%]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from batch.policies import POLICY_NAMES
from batch.simulate import Budget
from streams.simulate import run_simulation
from streams.timeline_io import read_timeline

FLOOR_SECONDS = 60.0
DEFAULT_TIMELINE = Path(__file__).resolve().parents[2] / "shared/data/S-timeline/versions.jsonl.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeline", type=Path, default=DEFAULT_TIMELINE)
    parser.add_argument("--budget", default="5%")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores)")
    t0 = time.perf_counter()
    timeline = read_timeline(args.timeline).timeline
    print(f"read {timeline} in {time.perf_counter() - t0:.1f} s")
    run = run_simulation(timeline, [Budget.parse(args.budget)], POLICY_NAMES)
    for crawl in run.crawls:
        d = crawl.discovery
        print(
            f"  {crawl.policy:<12} {crawl.seconds:5.1f} s  {d.fetches:6,} fetches  "
            f"{d.fetches / crawl.seconds:8,.0f} fetches/s"
        )
    print(
        f"all {len(run.crawls)} policies at {args.budget}: {run.seconds:.1f} s "
        f"(floor {FLOOR_SECONDS:.0f} s; ratio {run.seconds / FLOOR_SECONDS:.2f})"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
