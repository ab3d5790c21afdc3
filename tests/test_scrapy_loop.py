"""A real crawler in the loop: the example Scrapy project (examples/scrapy) crawls the living
site while the real Tansu broker, real `lookaround worker` processes and the real Redis run.
Its events go through the topic, priorities come back, its recrawl scheduler recrawls by them.

* `test_scrapy_loop`: a generated site (so it runs wherever the tests do, CI included), 20
  days of it, a simulated day in 1.5 seconds; the worker is killed mid-crawl and a new one
  started. Every page the site served has its event in the topic, with the page's state at that
  moment; every event has its priority back; the crawl's own WARC archive, imported with
  `lookaround import-warc`, gives the same events and the same page states as the worker
  keeps in Redis.
* `test_lookaround_against_a_fixed_interval`: S-timeline's first four weeks (a simulated day
  in 6 seconds) crawled twice at the same request budget, by lookaround's priorities and
  round-robin at a fixed interval; the figures are printed (`bench/scrapy_loop.py` measures
  the whole window and the floor).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import orjson
import pytest

pytest.importorskip("scrapy")

from batch.generate import GeneratorConfig, generate_events
from batch.timeline import timeline_from_fetches
from online.events import parse_event
from online.history import states_equal
from streams.crawlers.harness import (
    CrawlPlan,
    crawl_stats,
    discovery,
    start_crawl,
)
from streams.harness import wait_for, worker_settings
from streams.kafka_io import ensure_topics
from streams.living_site import LivingSite
from streams.redis_store import RedisPageStore
from streams.warc import WarcImporter

pytestmark = pytest.mark.timeout(600)

DAY = 86_400.0
ROOT = Path(__file__).resolve().parents[1]
S_TIMELINE = ROOT.parent / "shared" / "data" / "S-timeline" / "versions.jsonl.gz"


@pytest.fixture(scope="module")
def generated_timeline():
    """An awesome-list site (one host, links changing every week): 150 pages, 3 weeks."""
    config = GeneratorConfig(pages=150, crawls=4, regime="aggregator", content="text", seed=3)
    return timeline_from_fetches([parse_event(e) for e in generate_events(config)])


def events_of(settings, topic: str) -> list[dict]:
    from streams.topic_replay import read_topic

    return [orjson.loads(m.value) for m in read_topic(settings, topic)]


def expected_links(site: LivingSite, version) -> set[str]:
    """The outlinks a crawler sees on a served version: the site's own on this server."""
    from w3lib.url import safe_url_string

    from online.html import normalise_links

    links = [site.local_url(link) or safe_url_string(link) for link in version.outlinks]
    return set(normalise_links(links)[0])


def test_scrapy_loop(broker, redis_client, prefix, workers, generated_timeline, tmp_path):
    timeline = generated_timeline.window(
        generated_timeline.start, generated_timeline.start + 12 * DAY
    )
    settings = worker_settings(broker, prefix, batch_size=200)
    ensure_topics(settings)
    first = workers(settings, "first")
    first.wait_healthy()
    day_seconds = 1.5
    site = LivingSite(timeline, day_seconds=day_seconds).start()
    warc = tmp_path / "crawl.warc.gz"
    pages = len(timeline.alive_at(timeline.start))
    plan = CrawlPlan(
        mode="budget",
        per_minute=0.5 * pages * 60 / day_seconds,  # half the pages a simulated day
        until=timeline.end,
        warc=warc,
        spool=tmp_path / "undelivered.jsonl",
    )
    log = tmp_path / "scrapy.log"
    try:
        site.restart_clock()
        crawl = start_crawl(site, settings, plan, log)
        # The worker dies mid-crawl (SIGKILL: nothing committed past its last batch) and
        # another takes over while the crawl goes on.
        wait_for(lambda: first.metric("lookaround_priorities_out_total") > pages, 60, "work", first)
        first.kill()
        killed_at = len(site.served)
        second = workers(settings, "second")
        crawl.wait(timeout=120)
        assert crawl.returncode == 0, log.read_text()[-3000:]
    finally:
        site.close()
    served = [s for s in site.served if s.status != 301]
    assert len(served) > killed_at > pages  # the crawl went on after the kill
    events = events_of(settings, settings.topic_fetched)
    # Every page the site served has its event in the topic: one per fetch, no more.
    assert Counter(site.timeline_url(e["url"]) for e in events) == Counter(s.url for s in served)
    # ... each with the page's state at that moment (fetches of a page in order).
    by_url: dict[str, list] = {}
    for s in served:
        by_url.setdefault(s.url, []).append(s)
    for url, fetches in by_url.items():
        mine = sorted((e for e in events if site.timeline_url(e["url"]) == url),
                      key=lambda e: e["fetched_at"])  # fmt: skip
        for fetch, event in zip(sorted(fetches, key=lambda s: s.at), mine, strict=True):
            version = timeline.state_at(url, fetch.at)
            assert event["status"] == (version.status if version else 404)
            assert set(event["outlinks"]) == (expected_links(site, version) if version else set())
    recrawled = sum(1 for fetches in by_url.values() if len(fetches) > 1)
    assert recrawled > pages / 2
    # Every event has its priority back, across the worker's death.
    keys = {(e["url"], _ts(e["fetched_at"])) for e in events}

    def answered() -> set:
        return {
            (p["url"], _ts(p["fetched_at"])) for p in events_of(settings, settings.topic_priorities)
        }

    wait_for(lambda: answered() >= keys, 120, "a priority for every event", second)
    stats = crawl_stats(log)
    assert stats["lookaround/events_published"] == len(events)
    assert stats["lookaround/events_failed"] == 0 and not plan.spool.exists()
    assert stats["lookaround/recrawls_issued"] > 0 and stats["lookaround/priorities_applied"] > 0
    found = discovery(site)
    assert found.found > 0  # recrawls by lookaround's priorities found new links
    # The crawl's archive: the same events, and the same page states as the worker keeps.
    importer = WarcImporter()
    archived = list(importer.events([warc]))
    assert importer.counts.revisits > 0 and not importer.rejects

    def comparable(rows):
        return sorted(
            (r["url"], r["fetched_at"], r["status"], tuple(sorted(r["outlinks"])),
             r.get("content_digest"), r.get("text"))
            for r in rows
        )  # fmt: skip

    assert comparable(archived) == comparable(events)
    replayed = _page_states(archived)
    store = RedisPageStore(redis_client, prefix=settings.redis_key_prefix)
    urls = sorted(replayed)
    for url, state in zip(urls, store.get_states(urls), strict=True):
        assert state is not None and states_equal(state, replayed[url]), url


def _ts(value: str) -> float:
    return round(datetime.fromisoformat(value).timestamp(), 6)


def _page_states(events: list[dict]) -> dict:
    """The page states the embedded pipeline keeps after ``events`` in order."""
    from online.fetch import prepare
    from online.index import FaissIndex
    from online.pipeline import PagePipeline, PipelineConfig
    from online.scorers import DEFAULT_SCORER, get_scorer
    from online.stores import MemoryPageStore

    store = MemoryPageStore()
    pipeline = PagePipeline(store, FaissIndex(), get_scorer(DEFAULT_SCORER), PipelineConfig())
    ordered = sorted(events, key=lambda e: e["fetched_at"])
    for start in range(0, len(ordered), 500):
        pipeline.process([prepare(parse_event(e)) for e in ordered[start : start + 500]])
    return store.states


@pytest.mark.timeout(1200)  # two crawls of 28 simulated days at 6 s a day, and their start
@pytest.mark.skipif(not S_TIMELINE.exists(), reason=f"S-timeline not found at {S_TIMELINE}")
def test_lookaround_against_a_fixed_interval(broker, prefix, workers, tmp_path):
    """The same request budget (5% of the pages a simulated day), the same seeds, the same
    site: lookaround's recrawl order against round-robin at a fixed interval."""
    from streams.timeline_io import read_timeline

    full = read_timeline(S_TIMELINE).timeline
    timeline = full.window(full.start, full.start + 28 * DAY)
    pages = len(timeline.alive_at(timeline.start))
    # A simulated day in 6 seconds: the crawler, the site, the broker and the worker share 2
    # cores, and the comparison holds only while both crawls can spend the whole budget (a
    # crawl that cannot is held back by its own throughput, which the worker's share lowers).
    # The seed crawl, the same pages in both, takes what the machine allows, and the budget it
    # leaves unspent is the gap between the two crawls: at a day in 2 seconds a machine that
    # runs pure Python at half the speed of another spent 19% of lookaround's budget and 35%
    # of the baseline's, and the fetches differed by 11%.
    day_seconds = 6.0
    per_minute = 0.05 * pages * 60 / day_seconds
    results = {}
    for mode in ("budget", "interval"):
        settings = worker_settings(broker, f"{prefix}{mode[0]}", batch_size=500)
        ensure_topics(settings)
        if mode == "budget":
            worker = workers(settings, mode)
            worker.wait_healthy()
        site = LivingSite(timeline, day_seconds=day_seconds).start()
        log = tmp_path / f"{mode}.log"
        try:
            site.restart_clock()
            crawl = start_crawl(site, settings, CrawlPlan(mode, per_minute, timeline.end), log)
            crawl.wait(timeout=28 * day_seconds + 240)
            assert crawl.returncode == 0, log.read_text()[-3000:]
        finally:
            site.close()
        results[mode] = (discovery(site), crawl_stats(log))
        if mode == "budget":
            # The baseline crawls on a machine of its own: the worker goes, with whatever it
            # had not yet read of this crawl (on a slow machine it may be behind), so that its
            # backlog does not take the baseline's CPU.
            published = results[mode][1]["lookaround/events_published"]
            behind = published - worker.metric("lookaround_events_in_total")
            worker.kill()
            print(f"\nthe worker was {behind:.0f} events behind when the crawl ended")
        time.sleep(0.5)
    (ours, ours_stats), (base, base_stats) = results["budget"], results["interval"]
    print(
        f"\nS-timeline weeks 1-4, 5%/day: lookaround {ours.fetches} fetches, "
        f"{ours.found} links found ({ours.found_7d} within 7 days), {ours.born_found} born pages; "
        f"fixed interval {base.fetches} fetches, {base.found} links ({base.found_7d}), "
        f"{base.born_found} born pages"
    )
    for mode, (_, stats) in results.items():
        spent = {k.split("/")[1]: v for k, v in stats.items() if k.startswith("lookaround/")}
        print(f"{mode}: {spent}")
    # The same budget spent by both (within 5%), both finding what the site's changes show.
    assert abs(ours.fetches - base.fetches) <= 0.05 * base.fetches
    assert ours.found > 0 and base.found > 0 and ours.born_found > 0 and base.born_found > 0
    assert ours_stats["lookaround/priorities_applied"] > pages
    assert "lookaround/priorities_applied" not in base_stats  # the baseline reads no priorities
