"""Related updates: a page's new links announce its siblings' (translations), from the pipeline
(`online.related_updates`) through the replay's run directory, the stores and a crawler's
frontier."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import orjson
import pytest
from isal import igzip

from online.events import FetchedPage, parse_event
from online.history import Interval
from online.index import FaissIndex
from online.pipeline import PagePipeline, PipelineConfig
from online.priority_update import PriorityUpdate
from online.related_updates import GroupGain, SiblingFollow, SiblingGroup, group_pass
from online.scorers import get_scorer
from online.stores import MemoryPageStore, sibling_group
from streams.crawlers.frontier import RecrawlFrontier
from streams.replay import read_related, replay
from tests.test_pipeline import BytesPageStore

pytestmark = pytest.mark.unit

DAY = 86_400
T0 = 1_767_225_600  # 2026-01-01
DIM = 8
LANGS = ("en", "de", "fr")


def page(lang: str, slug: str) -> str:
    return f"https://docs.example.org/{lang}/guides/{slug}/"


def event(url: str, at: float, links: list[str], status: int = 200) -> FetchedPage:
    raw = {"url": url, "fetched_at": int(at), "outlinks": links, "status": status}
    return parse_event(raw, embedding_dim=DIM)


def site(rounds: int = 4) -> list[FetchedPage]:
    """Three languages of two guides, fetched weekly, English first, German an hour later,
    French two. ``deploy`` gains a link in English and German in round 1 (day 7), never in
    French; ``intro`` never changes."""
    events = []
    for r in range(rounds):
        for k, lang in enumerate(LANGS):
            for slug in ("deploy", "intro"):
                links = [page(lang, "intro")]
                if slug == "deploy" and r >= 1 and lang in ("en", "de"):
                    links.append(page(lang, "new-1"))
                at = T0 + r * 7 * DAY + k * 3600 + (slug == "intro") * 60
                events.append(event(page(lang, slug), at, links))
    events.sort(key=lambda e: e.timestamp)
    return events


def multilingual_site(slugs: int = 12, rounds: int = 5, seed: int = 0) -> list[dict]:
    """Raw events of a docs site in three languages, fetched weekly: each round an English
    guide gains a link with chance 0.3; German has it the same round with chance 0.6, else a
    round later; French a round later with chance 0.5."""
    rng = np.random.default_rng(seed)
    links = {(lang, s): [page(lang, "intro")] for lang in LANGS for s in range(slugs)}
    raws = []
    for r in range(rounds):
        for s in range(slugs):
            if r and rng.random() < 0.3:
                new = f"new-{r}-{s}"
                links["en", s].append(page("en", new))
                (
                    links["de", s] if rng.random() < 0.6 else links.setdefault(("de-next", s), [])
                ).append(page("de", new))
                if rng.random() < 0.5:
                    links.setdefault(("fr-next", s), []).append(page("fr", new))
        for k, lang in enumerate(LANGS):
            for s in range(slugs):
                at = T0 + r * 7 * DAY + k * 3600 + s * 60
                raws.append(
                    {"url": page(lang, f"g{s}"), "fetched_at": at, "outlinks": list(links[lang, s])}
                )
        for s in range(slugs):  # what lags a round arrives now
            links["de", s] += links.pop(("de-next", s), [])
            links["fr", s] += links.pop(("fr-next", s), [])
    return sorted(raws, key=lambda raw: raw["fetched_at"])


def pipeline(store=None) -> PagePipeline:  # type: ignore[no-untyped-def]
    return PagePipeline(
        store if store is not None else MemoryPageStore(),
        FaissIndex(dim=DIM),
        get_scorer("lbla"),
        PipelineConfig(embedding_dim=DIM, neighbours=4),
    )


def related_of(events: list[FetchedPage], batch: int, store=None) -> list[dict]:  # type: ignore[no-untyped-def]
    p = pipeline(store)
    out: list[dict] = []
    for i in range(0, len(events), batch):
        out.extend(p.process_batch(events[i : i + batch]).related)
    return [{k: v for k, v in u.items() if k != "scored_at"} for u in out]


def test_a_gain_announces_itself_to_the_siblings_not_yet_fetched_since() -> None:
    updates = related_of(site(), batch=1)
    first = [u for u in updates if u["related_to"]["url"] == page("en", "deploy")]
    # round 1: English gains at day 7 + 0 h; German (1 h later) and French are told at once
    assert [u["url"] for u in first[:2]] == [page("de", "deploy"), page("fr", "deploy")]
    de = first[0]
    assert de["kind"] == "related" and de["reasons"] == ["related_pages"]
    assert de["fetched_at"] == "2026-01-01T01:00:00Z"  # German's last fetch: its round 0
    assert de["next_fetch_at"] == de["related_to"]["fetched_at"] == "2026-01-08T00:00:00Z"
    assert de["related_to"]["new_links"] == 1
    # before any evidence, a translation follows in full: one link waiting, P = 1/2
    assert de["expected_waiting"] == 1.0 and de["p_new"] == 0.5
    assert de["rate_per_day"] == pytest.approx(1.0 / (7 - 1 / 24), rel=1e-5)
    PriorityUpdate.model_validate({**de, "scored_at": "2026-01-08T00:00:00Z"})  # the contract
    # intro never changes: nothing announced about it, nothing said to its siblings
    assert not any("intro" in u["url"] or "intro" in u["related_to"]["url"] for u in updates)


def test_what_followed_an_announcement_is_learned() -> None:
    p = pipeline()
    p.process_batch(site(rounds=3))
    # round 1: German followed English (1 link for 1), French did not follow German's gain;
    # round 2 told no one: English and German led the wave, French was told already
    assert p.follow == SiblingFollow(announced=2.0, followed=1.0, trials=2, hits=1)
    assert p.follow.share == pytest.approx(2 / 3) and p.follow.p_follow == pytest.approx(0.5)


def test_a_sibling_that_led_or_followed_the_wave_is_not_told() -> None:
    updates = related_of(site(rounds=3), batch=1)
    from_german = [u for u in updates if u["related_to"]["url"] == page("de", "deploy")]
    # German's gain goes to French only: English led this wave and showed its link
    assert [u["url"] for u in from_german] == [page("fr", "deploy")]
    # French is told by English, then by German (the lump learned meanwhile)
    to_french = [u["expected_waiting"] for u in updates if u["url"] == page("fr", "deploy")]
    assert to_french == [1.0, 1.0]


@pytest.mark.parametrize(
    "make",
    [
        lambda: site(rounds=4),
        lambda: [parse_event(raw, embedding_dim=DIM) for raw in multilingual_site()],
    ],
)
def test_related_updates_do_not_depend_on_batching_or_the_store(make) -> None:  # type: ignore[no-untyped-def]
    events = make()
    one = related_of(events, batch=1)
    assert one
    for size in (5, 1000):
        assert related_of(events, batch=size) == one
    assert related_of(events, batch=7, store=BytesPageStore()) == one


def test_no_update_for_a_sibling_gone_at_its_last_fetch() -> None:
    events = site(rounds=2)
    french = next(e for e in events if e.url == page("fr", "deploy"))
    dead = event(french.url, french.timestamp + 3 * DAY, [], status=404)  # gone before round 1
    updates = related_of(sorted([*events, dead], key=lambda e: e.timestamp), batch=1)
    told = {u["url"] for u in updates}
    assert page("fr", "deploy") not in told and page("de", "deploy") in told


def test_group_pass_learns_only_from_fetches_after_a_siblings_gain() -> None:
    urls = (page("en", "x"), page("de", "x"))
    ids = np.array([1, 2])
    groups = {"k": SiblingGroup(urls, ids, GroupGain(T0 + 5 * DAY, 2.0, 0.0, 1))}
    fetches = [
        # after the gain: learns 2 announced, 1 followed
        (urls[1], 2, T0 + 6 * DAY, Interval(1, 0, True, 2.0), -math.inf),
        # its own gain: nothing learned
        (urls[0], 1, T0 + 7 * DAY, Interval(0, 0, False, 7.0), T0 + 5 * DAY),
    ]
    done = group_pass(fetches, ["k", "k"], groups, SiblingFollow())
    assert done.follow == SiblingFollow(2.0, 1.0, 1, 1)
    gain = done.gains["k"]
    assert gain == (T0 + 6 * DAY, 1.0, 0.0, 2, T0 + 5 * DAY)
    assert [(a.url, a.siblings, a.position) for a in done.announcements] == [
        (urls[1], (urls[0],), 0)
    ]


def test_groups_keep_urls_and_their_ids() -> None:
    group = sibling_group([page("en", "a"), page("de", "a")], None)
    from online.links import url_id

    assert group.ids.tolist() == [url_id(page("en", "a")), url_id(page("de", "a"))]
    assert group.gain is None
    assert GroupGain.from_bytes(GroupGain(1.0, 2, 3, 4, 0.5).to_bytes()) == (1.0, 2, 3, 4, 0.5)
    assert math.isclose(SiblingFollow.from_bytes(SiblingFollow(1, 2, 3, 4).to_bytes()).share, 1.5)


def test_the_replay_writes_related_updates_beside_the_priorities(tmp_path: Path) -> None:
    events_file = tmp_path / "events.jsonl.gz"
    with igzip.open(events_file, "wb") as fh:
        for e in site(rounds=3):
            raw = {"url": e.url, "fetched_at": e.fetched_at.isoformat(), "outlinks": e.outlinks}
            fh.write(orjson.dumps(raw) + b"\n")
    summary = replay(events_file, tmp_path / "run", scorer="lbla", progress=False)
    written = list(read_related(tmp_path / "run"))
    assert summary.related_updates == len(written) > 0
    assert all(u["kind"] == "related" for u in written)


def test_a_frontier_applies_a_related_update_to_the_fetch_it_revises() -> None:
    f = RecrawlFrontier("due")
    own = {"url": "https://a.org/de/x", "fetched_at": 0.0, "next_fetch_at": 900_000.0}
    assert f.update({**own, "score": 0.1})
    assert not f.update({**own, "score": 0.2})  # a redelivered update of the same fetch
    assert f.take(now=1000.0, n=5, real_now=0.0) == []
    related = {**own, "kind": "related", "next_fetch_at": 500.0, "score": 1.5}
    assert f.update(related)
    assert f.take(now=1000.0, n=5, real_now=0.0) == [("https://a.org/de/x", 1.5)]
