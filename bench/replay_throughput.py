"""Replay throughput with related pages kept (floors: 12,000 events/s drifting, 25,000 frozen).

Generates (or reuses) a 100,000-page × 10-crawl crawl with embeddings that drift a little at
every fetch, as real pages' do (``--embedding-drift 0`` keeps them frozen), replays it through
the embedded pipeline and prints events/s and the ratio to the floor for that kind of crawl
(issue 20: 12,000 events/s drifting, 25,000 frozen, on 2 cores; with ``--events``,
``--embedding-drift`` says which kind the file is). The generation time is not part of the
figure.

``--refresh-ratio`` replays the crawl with the learned scorer (the default, ``ensemble``)
with its batch model refreshed as the stream goes on and not, alternated ``--repeat`` times, and
prints the median ratios of the two throughputs, in events/s and in events per CPU-second
(floor 0.8).

    python bench/replay_throughput.py [--pages 100000] [--crawls 10] [--events FILE]
    python bench/replay_throughput.py --refresh-ratio --events FILE
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

from batch.generate import GeneratorConfig, write_events
from online.scorers import DEFAULT_SCORER
from streams.replay import replay

#: events/s on 2 cores: embeddings drifting, and frozen
FLOOR_DRIFTING, FLOOR_FROZEN = 12_000.0, 25_000.0
REFRESH_FLOOR = 0.8


def _cpu_seconds() -> float:
    """CPU seconds of this process (all its threads) and its finished children."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def refresh_ratio(events: Path, work: Path, batch_size: int, repeat: int) -> None:
    """The default scorer with and without refreshes, alternated ``repeat`` times: the median
    ratio of wall-clock events/s, and of events per CPU-second (what other jobs on the machine
    do not move)."""
    wall: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for round_ in range(repeat):
        for refresh in (False, True):
            before = _cpu_seconds()
            summary = replay(
                events, work / f"run-{refresh}-{round_}", batch_size=batch_size, refresh=refresh
            )
            spent = _cpu_seconds() - before
            wall[refresh].append(summary.events_read / summary.seconds)
            cpu[refresh].append(summary.events_read / spent)
            print(
                f"{DEFAULT_SCORER}, refreshes {'on' if refresh else 'off'}: "
                f"{wall[refresh][-1]:,.0f} events/s ({summary.seconds:.0f} s), "
                f"{cpu[refresh][-1]:,.0f} events per CPU-second"
                + (f", {len(summary.batch_models)} batch models" if refresh else ""),
                flush=True,
            )
    ratios = [on / off for on, off in zip(wall[True], wall[False], strict=True)]
    cpu_ratios = [on / off for on, off in zip(cpu[True], cpu[False], strict=True)]
    print(
        f"with refreshes / without: {statistics.median(ratios):.2f} events/s, "
        f"{statistics.median(cpu_ratios):.2f} events per CPU-second "
        f"(medians of {repeat}; floor {REFRESH_FLOOR})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--crawls", type=int, default=10)
    parser.add_argument("--events", type=Path, help="reuse this events file")
    parser.add_argument(
        "--embedding-drift",
        type=float,
        default=0.02,
        help="per fetch, embeddings move by noise of this norm, as real pages' do (0: frozen)",
    )
    parser.add_argument("--scorer", default="lbla")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument(
        "--refresh-ratio",
        action="store_true",
        help="the default scorer with and without its batch-model refreshes",
    )
    parser.add_argument("--repeat", type=int, default=2, help="rounds of --refresh-ratio")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lookaround-bench-"))
    events = args.events
    if events is None:
        events = work / "crawl.jsonl.gz"
        started = time.perf_counter()
        config = GeneratorConfig(
            pages=args.pages, crawls=args.crawls, seed=0, embedding_drift=args.embedding_drift
        )
        write_events(events, config)
        print(f"generated {events} in {time.perf_counter() - started:.1f} s")
    if args.refresh_ratio:
        refresh_ratio(events, work, args.batch_size, args.repeat)
        return
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
                    "index_lists",
                    "index_probes",
                    "neighbour_searches",
                    "neighbour_searches_widened",
                    "seconds",
                )
            }
        )
    )
    floor = FLOOR_DRIFTING if args.embedding_drift > 0 else FLOOR_FROZEN
    kind = "drifting" if args.embedding_drift > 0 else "frozen"
    print(
        f"replay throughput: {eps:,.0f} events/s "
        f"(floor {floor:,.0f} with embeddings {kind}; ratio {eps / floor:.2f})"
    )


if __name__ == "__main__":
    main()
