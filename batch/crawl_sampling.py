"""A site's timeline crawled the way a real crawler crawls it: rounds whose fetches spread over
time, fetches that are skipped or fail, pages found only in a later round.

Snapshot crawls (every page fetched at the same instant of every round, all of them
answering) are the easy case for a recrawl scorer: every interval is the same length, so a
count per interval and a rate per day rank alike. A crawler's own log is not like that, and a
scorer has to hold its quality on it too. `sample_crawls` makes such a log from any
`batch.timeline.Timeline` (a real site's, or one derived from repeated crawls), seeded, so
the same plan gives the same events:

* ``stagger``: a round's fetches spread over that share of the round (each page at its own
  uniformly drawn moment), so intervals differ from page to page and round to round;
* ``missed``: the share of fetches the crawler skips (no event; the page's next interval
  spans two rounds);
* ``failed``: the share of fetches that fail (status 503, no outlinks: the page's link
  history waits for its next successful fetch);
* ``late``: the share of the pages alive at the start that the crawler finds only in a
  later round of the first half of the crawl (pages born during the timeline are found in
  the first round after their birth anyway).

A page's first fetch is never skipped and never fails: it is how the crawler knows the page.

>>> from batch.timeline import Timeline, Version
>>> from online.events import parse_event
>>> day = 86_400.0
>>> def page(url, at, links):
...     return Version.of(parse_event({"url": url, "fetched_at": at, "outlinks": links}))
>>> t0 = 1_767_225_600.0
>>> timeline = Timeline({
...     "https://a.org/": [page("https://a.org/", t0, []),
...                        page("https://a.org/", t0 + 8 * day, ["https://a.org/n"])],
...     "https://a.org/b": [page("https://a.org/b", t0, [])]}, end=t0 + 21 * day)
>>> events = list(sample_crawls(timeline, CrawlPlan(every_seconds=7 * day)))
>>> [(e["crawl"], e["url"][8:], len(e["outlinks"])) for e in events]  # doctest: +ELLIPSIS
[(0, 'a.org/', 0), (0, 'a.org/b', 0), (1, 'a.org/', 0), (1, 'a.org/b', 0), (2, 'a.org/', 1), ...]
>>> spread = list(sample_crawls(timeline, CrawlPlan(7 * day, stagger=0.5, seed=1)))
>>> all(0 <= (parse_event(e).timestamp - t0 - e["crawl"] * 7 * day) < 3.5 * day for e in spread)
True
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from batch.timeline import Timeline
from online.page_events import iso_utc

#: The status of a fetch that failed (`CrawlPlan.failed`): the server did not answer in time.
FAILED_STATUS = 503


@dataclass(frozen=True)
class CrawlPlan:
    """How a crawler crawls a timeline: a round every ``every_seconds`` and the irregularities
    of the module docstring (shares from 0 to 1), drawn from ``seed``."""

    every_seconds: float
    stagger: float = 0.0
    missed: float = 0.0
    failed: float = 0.0
    late: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.every_seconds > 0:
            raise ValueError(f"every_seconds: {self.every_seconds} is not positive")
        for name in ("stagger", "missed", "failed", "late"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: {value} is outside [0, 1]")
        if self.stagger == 1.0:
            raise ValueError("stagger: 1.0 would let a round's fetches reach the next round")


def sample_crawls(timeline: Timeline, plan: CrawlPlan) -> Iterator[dict[str, Any]]:
    """The fetched-page events of crawling ``timeline`` by ``plan``: one round every
    ``plan.every_seconds`` from the timeline's start to its end, each round's events in the
    order of their fetch times, ``crawl`` numbering the rounds."""
    rng = np.random.default_rng(plan.seed)
    rounds = int((timeline.end - timeline.start) // plan.every_seconds) + 1
    found = _discovery_rounds(timeline, plan, rounds, rng)
    for crawl in range(rounds):
        start = timeline.start + crawl * plan.every_seconds
        fetches = []
        for url in timeline.alive_at(start):
            first = found.setdefault(url, crawl)
            if crawl < first:
                continue
            moment = start + rng.random() * plan.stagger * plan.every_seconds
            skipped, failing = rng.random() < plan.missed, rng.random() < plan.failed
            if crawl > first and skipped:
                continue
            fetches.append((moment, url, crawl > first and failing))
        for moment, url, failing in sorted(fetches):
            yield _fetch(timeline, url, moment, crawl, failing)


def _discovery_rounds(
    timeline: Timeline, plan: CrawlPlan, rounds: int, rng: np.random.Generator
) -> dict[str, int]:
    """The round in which each late page (a ``plan.late`` share of those alive at the start)
    is first fetched: one of the first half's later rounds."""
    latest = max(rounds // 2, 1)
    out: dict[str, int] = {}
    for url in timeline.alive_at(timeline.start):
        if rng.random() < plan.late and latest > 1:
            out[url] = int(rng.integers(1, latest))
    return out


def _fetch(timeline: Timeline, url: str, moment: float, crawl: int, failing: bool) -> dict:
    """The event of fetching ``url`` at ``moment``: the page's state then, or a failure."""
    if failing:
        return {"url": url, "fetched_at": iso_utc(moment), "status": FAILED_STATUS,
                "outlinks": [], "crawl": crawl}  # fmt: skip
    version = timeline.state_at(url, moment)
    assert version is not None  # alive at the round's start, so it has a state
    event = version.event(moment)
    event["crawl"] = crawl
    return event


__all__ = ["FAILED_STATUS", "CrawlPlan", "sample_crawls"]
