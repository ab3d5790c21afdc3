"""The generator's regimes: write speed of each and its statistics against its targets.

For each regime, writes a ``--pages`` x ``--crawls`` crawl to a temporary .jsonl.gz (best of
``--repeat`` runs: wall seconds, process CPU seconds, events/s, MB) and then measures the crawl
with ``interval_statistics`` against the regime's targets (``REGIME_TARGETS``), one row per
target: measured value, allowed range, ok; and its look-around signal
(``lookaround_correlation``). The load average is printed first: timings taken
on a busy machine are not comparable.

    python bench/generator_regimes.py [--pages 10000] [--crawls 10] [--seed 0]
        [--regimes paper,news,docs,aggregator] [--drift 0.0] [--repeat 1] [--no-stats]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import tempfile
import time
from pathlib import Path

from batch.crawlgen.stats import lookaround_correlation
from batch.crawlgen.targets import check_targets
from batch.generate import (
    REGIME_TARGETS,
    REGIMES,
    GeneratorConfig,
    generate_events,
    interval_statistics,
    write_events,
)


def _time_write(config: GeneratorConfig, repeat: int) -> dict[str, float]:
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "crawl.jsonl.gz"
        for _ in range(repeat):
            wall, cpu = time.perf_counter(), time.process_time()
            info = write_events(path, config, progress=False)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if not best or wall < best["wall_s"]:
                best = {
                    "wall_s": wall,
                    "cpu_s": cpu,
                    "events_per_s": info["events"] / wall,
                    "mb": info["bytes"] / 1e6,
                }
    return best


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "-"
    return f"{value:.4g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--crawls", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--regimes", default=",".join(REGIMES))
    parser.add_argument("--drift", type=float, default=0.0, help="--embedding-drift")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-stats", action="store_true", help="time only")
    args = parser.parse_args()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {load} on {os.cpu_count()} cores")
    print(f"{args.pages:,} pages x {args.crawls} crawls, seed {args.seed}, drift {args.drift}\n")
    print(f"{'regime':12s} {'wall s':>7s} {'CPU s':>7s} {'events/s':>9s} {'MB (.gz)':>9s}")
    configs = {}
    for regime in args.regimes.split(","):
        config = GeneratorConfig(
            regime=regime,
            pages=args.pages,
            crawls=args.crawls,
            seed=args.seed,
            embedding_drift=args.drift,
        )
        configs[regime] = config
        t = _time_write(config, args.repeat)
        print(
            f"{regime:12s} {t['wall_s']:7.2f} {t['cpu_s']:7.2f} "
            f"{t['events_per_s']:9,.0f} {t['mb']:9.1f}"
        )
    if args.no_stats:
        return
    for regime, config in configs.items():
        gc.disable()
        try:
            events = list(generate_events(config))
            mean = interval_statistics(events)["mean"]
            lookaround = lookaround_correlation(events)
        finally:
            del events
            gc.enable()
        rows = check_targets(mean, REGIME_TARGETS[regime])
        print(f"\n{regime}: {sum(r['ok'] for r in rows)}/{len(rows)} targets met")
        print(f"  look-around r (own vs 10 nearest pages' mean new links): {lookaround:.3f}")
        print(f"  {'statistic':40s} {'measured':>9s} {'low':>8s} {'high':>8s}  source")
        for r in rows:
            mark = "" if r["ok"] else "  <-- outside"
            print(
                f"  {r['statistic']:40s} {_fmt(r['value']):>9s} {_fmt(r['low']):>8s} "
                f"{_fmt(r['high']):>8s}  {r['source']}{mark}"
            )


if __name__ == "__main__":
    main()
