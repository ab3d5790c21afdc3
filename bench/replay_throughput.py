"""Replay throughput with related pages maintained (floor: 10,000 events/s on 2 cores).

Generates (or reuses) a 100,000-page × 10-crawl crawl with embeddings, replays it through
the embedded pipeline and prints events/s and the ratio to the floor. The generation time is
not part of the figure.

    python bench/replay_throughput.py [--pages 100000] [--crawls 10] [--events FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from batch.generate import GeneratorConfig, write_events
from streams.replay import replay

FLOOR = 10_000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--crawls", type=int, default=10)
    parser.add_argument("--events", type=Path, help="reuse this events file")
    parser.add_argument("--scorer", default="lbla")
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lookaround-bench-"))
    events = args.events
    if events is None:
        events = work / "crawl.jsonl.gz"
        started = time.perf_counter()
        write_events(events, GeneratorConfig(pages=args.pages, crawls=args.crawls, seed=0))
        print(f"generated {events} in {time.perf_counter() - started:.1f} s")
    summary = replay(events, work / "run", scorer=args.scorer, batch_size=args.batch_size)
    eps = summary.events_read / summary.seconds
    print(
        json.dumps(
            {
                k: getattr(summary, k)
                for k in (
                    "events_read",
                    "applied",
                    "pages",
                    "indexed_pages",
                    "neighbour_searches",
                    "seconds",
                )
            }
        )
    )
    print(f"replay throughput: {eps:,.0f} events/s (floor {FLOOR:,.0f}; ratio {eps / FLOOR:.2f})")


if __name__ == "__main__":
    main()
