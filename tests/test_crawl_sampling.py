"""A timeline crawled as a real crawler crawls it (`batch.crawl_sampling`): rounds, the
spread of their fetches, skipped and failed fetches, pages found late, the page state each
fetch returns, and the plan's validation."""

from __future__ import annotations

from collections import Counter

import pytest

from batch.crawl_sampling import FAILED_STATUS, CrawlPlan, sample_crawls
from batch.timeline import DAY, Timeline, Version
from online.events import parse_event

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
WEEK = 7 * DAY


def version(url: str, day: float, links: list[str], status: int = 200) -> Version:
    return Version.of(
        parse_event({"url": url, "fetched_at": T0 + day * DAY, "outlinks": links, "status": status})
    )


def site(pages: int = 300, weeks: int = 12) -> Timeline:
    """Pages that gain a link every few days, one born in week 3, one deleted in week 5."""
    versions: dict[str, list[Version]] = {}
    for p in range(pages):
        url = f"https://s.org/p{p}"
        versions[url] = [
            version(url, day, [f"https://s.org/p{p}/l{j}" for j in range(k)])
            for k, day in enumerate(range(0, weeks * 7, 3 + p % 5))
        ]
    versions["https://s.org/born"] = [version("https://s.org/born", 17.5, [])]
    p0 = [v for v in versions["https://s.org/p0"] if v.at < T0 + 33 * DAY]
    versions["https://s.org/p0"] = [*p0, version("https://s.org/p0", 33, [], status=404)]
    return Timeline(versions, end=T0 + weeks * WEEK)


def crawl(plan: CrawlPlan, timeline: Timeline | None = None) -> list[dict]:
    return list(sample_crawls(timeline or site(), plan))


def test_snapshot_rounds_fetch_every_live_page_at_the_round_start() -> None:
    timeline = site()
    events = crawl(CrawlPlan(WEEK), timeline)
    rounds = Counter(e["crawl"] for e in events)
    assert sorted(rounds) == list(range(13))
    assert rounds[0] == 300 and rounds[3] == 301  # the page born on day 17.5
    assert rounds[12] == 300  # p0 is gone after day 33, the born page stays
    for e in events:
        at = parse_event(e).timestamp
        assert at == T0 + e["crawl"] * WEEK
        assert e["outlinks"] == list(timeline.state_at(e["url"], at).outlinks)


def test_a_staggered_round_spreads_its_fetches_and_each_returns_the_state_at_its_time() -> None:
    timeline = site()
    events = crawl(CrawlPlan(WEEK, stagger=0.5, seed=3), timeline)
    times = [parse_event(e).timestamp for e in events]
    assert times == sorted(times)  # a crawler's log: in the order of its fetches
    offsets = [t - T0 - e["crawl"] * WEEK for t, e in zip(times, events, strict=True)]
    assert min(offsets) >= 0 and max(offsets) < 0.5 * WEEK
    assert max(offsets) > 0.45 * WEEK and len(set(offsets)) > 0.9 * len(offsets)
    for e, t in zip(events, times, strict=True):
        assert e["outlinks"] == list(timeline.state_at(e["url"], t).outlinks)


def test_skipped_and_failed_fetches_come_at_their_shares_never_on_a_first_fetch() -> None:
    plain = crawl(CrawlPlan(WEEK))
    events = crawl(CrawlPlan(WEEK, missed=0.2, failed=0.1, seed=5))
    later = len(plain) - 301  # fetches after a page's first
    assert 0.17 * later < len(plain) - len(events) < 0.23 * later
    failed = [e for e in events if e["status"] == FAILED_STATUS]
    assert 0.07 * later < len(failed) < 0.11 * later
    assert all(e["outlinks"] == [] and "content_digest" not in e for e in failed)
    first = {}
    for e in events:
        first.setdefault(e["url"], e)
    assert all(e["status"] == 200 for e in first.values())


def test_late_pages_are_found_in_a_later_round_of_the_first_half() -> None:
    events = crawl(CrawlPlan(WEEK, late=0.3, seed=9))
    first_round = {}
    for e in events:
        first_round.setdefault(e["url"], e["crawl"])
    at_start = [u for u in first_round if u != "https://s.org/born"]
    late = [u for u in at_start if first_round[u] > 0]
    assert 0.24 * len(at_start) < len(late) < 0.36 * len(at_start)
    assert {first_round[u] for u in late} == set(range(1, 6))
    assert first_round["https://s.org/born"] == 3


def test_the_same_plan_gives_the_same_crawl_and_another_seed_another() -> None:
    plan = CrawlPlan(WEEK, stagger=0.4, missed=0.1, failed=0.05, late=0.2, seed=1)
    assert crawl(plan) == crawl(plan)
    assert crawl(plan) != crawl(CrawlPlan(WEEK, stagger=0.4, missed=0.1, failed=0.05, late=0.2))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"every_seconds": 0.0}, "every_seconds"),
        ({"every_seconds": WEEK, "stagger": 1.0}, "stagger"),
        ({"every_seconds": WEEK, "missed": -0.1}, "missed"),
        ({"every_seconds": WEEK, "failed": 1.5}, "failed"),
        ({"every_seconds": WEEK, "late": float("nan")}, "late"),
    ],
)
def test_a_plan_out_of_range_is_refused_naming_its_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        CrawlPlan(**kwargs)
