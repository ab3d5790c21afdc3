"""Running the example Scrapy project against a living site, for tests and benchmarks: the
``scrapy crawl`` command with lookaround's settings, and what the crawl found, judged from the
site's own log of what it served (`batch.discovery.measure`: the same judge for every
crawler, whether it publishes events or not)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batch.discovery import Discovery, measure
from online.page_events import iso_utc
from streams.living_site import LivingSite
from streams.settings import Settings

#: the example project (a development checkout: examples/ is not installed with the package)
EXAMPLE_PROJECT = Path(__file__).resolve().parents[2] / "examples" / "scrapy"


@dataclass(frozen=True)
class CrawlPlan:
    """One crawl of a living site: the recrawl mode, the request budget, until when."""

    mode: str  # budget | due | interval
    per_minute: float
    until: float  # the site's clock
    interval_days: float = 0.0
    warc: Path | None = None
    spool: Path | None = None


def scrapy_command(
    site: LivingSite, settings: Settings, plan: CrawlPlan, spool: Path | None = None
) -> list[str]:
    """``scrapy crawl site`` with lookaround's settings (``-s``), for the example project.
    Undelivered events go to ``plan.spool``, else ``spool``, never into the project."""
    values: dict[str, Any] = {
        "LOOKAROUND_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "LOOKAROUND_TOPIC_FETCHED": settings.topic_fetched,
        "LOOKAROUND_TOPIC_PRIORITIES": settings.topic_priorities,
        "LOOKAROUND_CLOCK_URL": f"{site.base_url}/_clock",
        "LOOKAROUND_RECRAWL_UNTIL": iso_utc(plan.until),
        "LOOKAROUND_REQUESTS_PER_MINUTE": f"{plan.per_minute:.3f}",
        "LOOKAROUND_RECRAWL_MODE": plan.mode,
        "LOOKAROUND_RECRAWL_INTERVAL_DAYS": plan.interval_days,
        "LOG_LEVEL": "INFO",
    }
    if plan.warc is not None:
        values["LOOKAROUND_WARC_FILE"] = str(plan.warc)
    if (plan.spool or spool) is not None:
        values["LOOKAROUND_PUBLISH_SPOOL"] = str(plan.spool or spool)
    command = [sys.executable, "-m", "scrapy", "crawl", "site", "-a", f"site={site.base_url}"]
    for name, value in values.items():
        command += ["-s", f"{name}={value}"]
    return command


def start_crawl(
    site: LivingSite, settings: Settings, plan: CrawlPlan, log: Path
) -> subprocess.Popen:
    """The crawl in a subprocess (the example project's directory, lookaround's variables of
    this environment left out: the crawl takes its settings from the command line)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOKAROUND_")}
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            scrapy_command(site, settings, plan, spool=log.with_suffix(".undelivered.jsonl")),
            cwd=EXAMPLE_PROJECT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    finally:
        out.close()


def crawl_stats(log: Path) -> dict[str, float]:
    """The ``lookaround/...`` and downloader counters Scrapy dumped at the end of its log."""
    stats: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        line = line.strip().rstrip(",")
        if line.startswith(("'lookaround/", "'downloader/response_status_count/")):
            name, _, value = line.partition(":")
            try:
                stats[name.strip("{' ")] = float(value.strip())
            except ValueError:
                continue
    return stats


def discovery(site: LivingSite, since: int = 0) -> Discovery:
    """What the crawl that the site served from its ``since``-th request on found: link
    appearances and born pages of the timeline (`batch.discovery.measure`)."""
    served = site.served[since:]
    pages = [s for s in served if s.status != 301]
    return measure(site.timeline, [s.url for s in pages], [s.at for s in pages])
