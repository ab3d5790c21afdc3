"""A Scrapy crawl driven by lookaround against the same spider recrawling at a fixed interval,
at the same request budget, on the living S-timeline (floor: 1.2 x the born pages and the new
links found within the run).

    python bench/scrapy_loop.py                          # all 24 weeks, 5% a day, a day a second
    python bench/scrapy_loop.py --days 28 --budget 10%   # a slice, another budget

Each crawl gets a fresh living site (streams/living_site.py) whose clock starts at the
window's start, the same seeds (its sitemap) and the same request budget per simulated day
(``--budget``: a share of the pages alive at the start, or a number); the example project
(examples/scrapy) crawls it:

* ``lookaround``: a real ``lookaround worker`` (real Tansu broker, real Redis) scores every
  event; the recrawl scheduler spends the budget on the pages with the most new links
  expected to be waiting (``LOOKAROUND_RECRAWL_MODE=budget``, the square-root rule);
* ``fixed-interval``: the same spider without lookaround, every page in turn as often as the
  budget allows (``interval`` mode, interval 0: round-robin, i.e. every page every
  pages / budget days).

What each found is judged from the site's own log of what it served (`batch.discovery`):
link appearances found within the run (and within 7 days of appearing), born pages found.
Prints the table and the ratios against the floor; ``--out`` gets the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DAY = 86_400.0
FLOOR = 1.2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--timeline", type=Path, default=ROOT.parent / "shared/data/S-timeline/versions.jsonl.gz"
    )
    parser.add_argument("--days", type=float, default=None, help="days of the window (all)")
    parser.add_argument("--day-seconds", type=float, default=1.0)
    parser.add_argument("--budget", default="5%")
    parser.add_argument("--out", type=Path, default=ROOT / "runs/bench-scrapy-loop")
    args = parser.parse_args(argv)

    from batch.simulate import Budget
    from streams.crawlers.harness import CrawlPlan, crawl_stats, discovery, start_crawl
    from streams.harness import WorkerProcess, worker_settings
    from streams.kafka_io import ensure_topics, free_port, start_tansu
    from streams.living_site import LivingSite
    from streams.timeline_io import read_timeline

    if not args.timeline.exists():
        print(f"no timeline at {args.timeline}", file=sys.stderr)
        return 2
    timeline = read_timeline(args.timeline).timeline
    if args.days is not None:
        end = min(timeline.end, timeline.start + args.days * DAY)
        timeline = timeline.window(timeline.start, end)
    pages = len(timeline.alive_at(timeline.start))
    per_day = Budget.parse(args.budget).per_day(pages)
    per_minute = per_day * 60.0 / args.day_seconds
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    tansu = start_tansu(port, args.out / "tansu.log")
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    results = {}
    worker = None
    try:
        for name, mode in (("lookaround", "budget"), ("fixed-interval", "interval")):
            settings = worker_settings(f"127.0.0.1:{port}", f"{prefix}{mode[0]}", batch_size=500)
            ensure_topics(settings)
            if mode == "budget":
                worker = WorkerProcess(settings, args.out / "worker.log").start()
                worker.wait_healthy(120)
            site = LivingSite(timeline, day_seconds=args.day_seconds).start()
            log = args.out / f"{name}.log"
            log.unlink(missing_ok=True)
            started = time.time()
            try:
                site.restart_clock()
                crawl = start_crawl(site, settings, CrawlPlan(mode, per_minute, timeline.end), log)
                crawl.wait(timeout=timeline.days * args.day_seconds + 600)
            finally:
                site.close()
            found = discovery(site)
            stats = crawl_stats(log)
            results[name] = {
                **found.summary(),
                "seconds": time.time() - started,
                "recrawls": stats.get("lookaround/recrawls_issued", 0),
                "found_pages_requested": stats.get("lookaround/requests_found", 0),
                "status_404": stats.get("downloader/response_status_count/404", 0),
            }
            print(
                f"{name}: {found.fetches:,} fetches ({results[name]['recrawls']:,.0f} recrawls), "
                f"{found.found:,} of {found.appearances:,} link appearances found "
                f"({found.found_7d:,} within 7 days), {found.born_found} of {found.born} born "
                f"pages, {results[name]['status_404']:,.0f} fetches of 404s; "
                f"{results[name]['seconds']:.0f} s",
                flush=True,
            )
            if worker is not None:
                worker.kill()
                worker = None
    finally:
        if worker is not None:
            worker.kill()
        tansu.terminate()
        try:
            tansu.wait(5)
        except subprocess.TimeoutExpired:
            tansu.kill()
    ours, base = results["lookaround"], results["fixed-interval"]
    ratios = {
        key: (ours[key] / base[key] if base[key] else float("inf"))
        for key in ("born_found", "found", "found_7d")
    }
    print(
        f"\n{timeline.days:.0f} days of {args.timeline.name}, budget {args.budget} a day "
        f"({per_day:.1f} fetches, {per_minute:,.0f} requests a minute at "
        f"{args.day_seconds:g} s a day):"
    )
    print("| crawl | fetches | links found | within 7 days | born pages found |")
    print("|---|---|---|---|---|")
    for name, row in results.items():
        print(
            f"| {name} | {row['fetches']:,} | {row['found']:,} | {row['found_7d']:,} | "
            f"{row['born_found']} of {row['born']} |"
        )
    print(
        f"ratios lookaround / fixed-interval: born pages {ratios['born_found']:.2f}, links "
        f"{ratios['found']:.2f}, links within 7 days {ratios['found_7d']:.2f} (floor {FLOOR}): "
        + ("met" if min(ratios["born_found"], ratios["found"]) >= FLOOR else "NOT met")
    )
    figures = {"results": results, "ratios": ratios}
    (args.out / "results.json").write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
