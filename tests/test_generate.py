"""The synthetic crawl must look like the paper's before anything is tested or tuned on it."""

from __future__ import annotations

import gzip
import math
import re
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from batch.crawlgen.stats import lookaround_correlation, neighbour_correlation, new_outlinks
from batch.crawlgen.targets import measured
from batch.generate import (
    PAPER_TARGETS,
    GeneratorConfig,
    weekly_statistics,
    write_events,
)

MAIN = GeneratorConfig(pages=8_000, crawls=10, seed=0)
CONTENT_FIELDS = {
    "content_size",
    "text_size",
    "text_quality",
    "content_digest",
    "embedding",
    "text",
}
GRAPH_FIELDS = {"inlinks_internal", "inlinks_external", "pagerank", "trustrank"}
ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
Events = list[dict[str, Any]]
CollectEvents = Callable[[GeneratorConfig], Events]
MeasuredCrawl = Callable[[GeneratorConfig], tuple[Events, dict[str, Any]]]


@pytest.fixture(scope="module")
def events(measured_crawl: MeasuredCrawl) -> list[dict[str, Any]]:
    return measured_crawl(MAIN)[0]


@pytest.fixture(scope="module")
def stats(measured_crawl: MeasuredCrawl) -> dict[str, Any]:
    return measured_crawl(MAIN)[1]


def _new_links_by_page(evs: list[dict[str, Any]]) -> dict[str, list[int]]:
    """New-outlink counts per page and interval (internal + external), 2xx after 2xx only."""
    return {u: [len(v) for v in by_crawl.values()] for u, by_crawl in new_outlinks(evs).items()}


def _auc(score: np.ndarray, label: np.ndarray) -> float:
    """Rank AUC with ties averaged."""
    _, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = ((ends - counts + 1 + ends) / 2.0)[inverse]
    pos = int(label.sum())
    neg = label.size - pos
    return float((ranks[label].sum() - pos * (pos + 1) / 2) / (pos * neg))


# -- paper statistics --------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(PAPER_TARGETS))
def test_weekly_statistic_matches_paper(stats: dict[str, Any], key: str) -> None:
    spec = PAPER_TARGETS[key]
    value = measured(stats["mean"], key)
    if "min" in spec:
        assert value >= spec["min"], (
            f"{key}={value:.4f}, paper {spec['paper']}: want >= {spec['min']}"
        )
    else:
        assert spec["low"] <= value <= spec["high"], (
            f"{key}={value:.4f}, paper {spec['paper']}: want {spec['target']} "
            f"+/- {spec['tolerance']} (tolerance)"
        )


def test_every_week_is_paper_like(stats: dict[str, Any]) -> None:
    """Not only the average: no single week leaves the paper's ranges by much."""
    assert len(stats["weeks"]) == MAIN.crawls - 1
    for row in stats["weeks"]:
        for key in ("new_internal_mean", "zero_internal_share", "zero_external_share"):
            spec = PAPER_TARGETS[key]
            slack = spec["tolerance"]  # one extra tolerance for a single week
            assert spec["low"] - slack <= row[key] <= spec["high"] + slack, (key, row)


def test_persistence_is_far_above_independent_weeks(stats: dict[str, Any]) -> None:
    lift = PAPER_TARGETS["group_persistence_lift"]["min"]
    for row in stats["persistence"]:
        assert row["stay_share"] > PAPER_TARGETS["group_persistence"]["min"], row
        assert row["stay_share"] - row["independent_share"] > lift, row


def test_heavy_tail_is_not_geometric(stats: dict[str, Any]) -> None:
    """A geometric law with the same mean (~3) puts ~1e-12 of the mass at >= 100 links."""
    ccdf = stats["ccdf_total"]
    assert ccdf[100] > 1e-3, ccdf
    assert ccdf[1] > ccdf[3] > ccdf[10] > ccdf[30] > ccdf[100], ccdf
    assert max(row["new_total_max"] for row in stats["weeks"]) >= 100


def test_look_back_beats_content_change_baseline(events: list[dict[str, Any]]) -> None:
    """Past link change predicts link change; past digest change hardly does (the paper's point)."""
    prev: dict[str, tuple[set[str], str]] = {}
    digest: dict[str, list[bool]] = {}
    link: dict[str, list[bool]] = {}
    for ev in events:
        if ev["status"] != 200:
            prev.pop(ev["url"], None)
            continue
        links = set(ev["outlinks"])
        if ev["url"] in prev:
            before, before_digest = prev[ev["url"]]
            digest.setdefault(ev["url"], []).append(ev["content_digest"] != before_digest)
            link.setdefault(ev["url"], []).append(bool(links - before))
        prev[ev["url"]] = (links, ev["content_digest"])
    pages = [u for u, weeks in link.items() if len(weeks) == MAIN.crawls - 1]
    d = np.array([digest[u] for u in pages])
    y = np.array([link[u] for u in pages])
    train, test = slice(0, 5), slice(5, None)
    truth = y[:, test].ravel()
    weeks = y[:, test].shape[1]
    digest_auc = _auc(np.repeat(d[:, train].mean(axis=1), weeks), truth)
    look_back_auc = _auc(np.repeat(y[:, train].mean(axis=1), weeks), truth)
    assert 0.5 < digest_auc < 0.65, f"content-change baseline should be near random: {digest_auc}"
    assert look_back_auc > 0.75, f"past link change should predict link change: {look_back_auc}"
    assert d[y].mean() > d[~y].mean(), (
        "digest changes should be a bit likelier in link-change weeks"
    )


# -- the look-around signal --------------------------------------------------------------------


def test_embedding_neighbours_share_link_change(events: list[dict[str, Any]]) -> None:
    r = lookaround_correlation(events)
    assert r > 0.3, f"look-around signal too weak: r={r:.3f}"


def test_text_mode_clusters_under_hashed_bag_of_words(collect_events: CollectEvents) -> None:
    config = GeneratorConfig(pages=3_000, crawls=6, seed=3, content="text")
    evs = collect_events(config)
    alive = [ev for ev in evs if ev["status"] == 200]
    assert all("text" in ev and "embedding" not in ev for ev in alive)
    counts = _new_links_by_page(evs)
    texts = {ev["url"]: ev["text"] for ev in alive if ev["crawl"] == 0}
    pages = [u for u, weeks in counts.items() if len(weeks) >= 3]
    bow = np.zeros((len(pages), 1024), dtype=np.float32)
    for row, url in enumerate(pages):
        for word in texts[url].split():
            bow[row, zlib.crc32(word.encode()) % 1024] += 1.0
    bow /= np.linalg.norm(bow, axis=1, keepdims=True)
    values = np.log1p(np.array([np.mean(counts[u]) for u in pages]))
    r = neighbour_correlation(bow, values)
    assert r > 0.3, f"text look-around signal too weak: r={r:.3f}"

    # Content streams are separate from the link dynamics: same links in every content mode.
    same = collect_events(GeneratorConfig(pages=3_000, crawls=6, seed=3, content="none"))
    assert [(e["url"], e["outlinks"]) for e in evs] == [(e["url"], e["outlinks"]) for e in same]


def test_embeddings_are_fixed_unless_rewritten(events: list[dict[str, Any]]) -> None:
    seen: dict[str, list[float]] = {}
    changed = total = 0
    for ev in events:
        if ev["status"] != 200:
            continue
        before = seen.get(ev["url"])
        if before is not None:
            total += 1
            changed += before != ev["embedding"]
        seen[ev["url"]] = ev["embedding"]
    assert 0 < changed / total < 0.02, changed / total


# -- the event contract ------------------------------------------------------------------------


def test_event_contract(events: list[dict[str, Any]]) -> None:
    base = {"url", "fetched_at", "crawl", "status", "outlinks"} | GRAPH_FIELDS
    ok = base | CONTENT_FIELDS - {"text"}
    for ev in events[::7]:
        assert ev["url"].startswith("https://") and ev["url"].endswith("/")
        assert ISO_Z.match(ev["fetched_at"]), ev["fetched_at"]
        assert isinstance(ev["crawl"], int) and isinstance(ev["status"], int)
        assert isinstance(ev["inlinks_internal"], int) and ev["inlinks_internal"] >= 0
        assert isinstance(ev["inlinks_external"], int) and ev["inlinks_external"] >= 0
        assert isinstance(ev["pagerank"], float) and ev["pagerank"] > 0
        assert isinstance(ev["trustrank"], float) and ev["trustrank"] >= 0
        if ev["status"] != 200:
            continue
        assert set(ev) == ok, set(ev) ^ ok
        links = ev["outlinks"]
        assert len(links) == len(set(links)) > 0
        assert all(u.startswith("https://") and "." in u[8:].split("/")[0] for u in links)
        assert isinstance(ev["content_size"], int) and ev["content_size"] > ev["text_size"] > 0
        assert isinstance(ev["text_quality"], float) and 0.0 <= ev["text_quality"] <= 1.0
        assert re.fullmatch(r"[0-9a-f]{32}", ev["content_digest"])
        emb = ev["embedding"]
        assert isinstance(emb, list) and len(emb) == MAIN.embedding_dim
        assert all(isinstance(x, float) and round(x, 5) == x for x in emb)
        assert abs(math.sqrt(sum(x * x for x in emb)) - 1.0) < 1e-3


def test_crawl_and_time_order(events: list[dict[str, Any]]) -> None:
    assert len(events) == MAIN.pages * MAIN.crawls
    crawls = [ev["crawl"] for ev in events]
    assert crawls == sorted(crawls)
    for c in range(MAIN.crawls):
        block = events[c * MAIN.pages : (c + 1) * MAIN.pages]
        assert {ev["crawl"] for ev in block} == {c}
        assert len({ev["url"] for ev in block}) == MAIN.pages
        stamps = [ev["fetched_at"] for ev in block]
        assert stamps == sorted(stamps)
        first = MAIN.start + timedelta(days=c * MAIN.interval_days)
        lo = datetime.fromisoformat(stamps[0].replace("Z", "+00:00"))
        hi = datetime.fromisoformat(stamps[-1].replace("Z", "+00:00"))
        assert first <= lo and hi < first + timedelta(days=2)
        assert hi - lo > timedelta(days=1.9)


def test_dead_pages_stay_dead_without_content(events: list[dict[str, Any]]) -> None:
    died: dict[str, int] = {}
    for ev in events:
        if ev["status"] == 404:
            died.setdefault(ev["url"], ev["crawl"])
            assert ev["outlinks"] == []
            assert not CONTENT_FIELDS & set(ev), set(ev)
        else:
            assert ev["status"] == 200
            assert ev["url"] not in died, "a dead page came back"
    assert 0.005 <= len(died) / MAIN.pages <= 0.03, len(died)
    assert min(died.values()) >= 1


def test_outlink_counts_are_realistic_and_bounded(events: list[dict[str, Any]]) -> None:
    sizes: dict[int, list[int]] = {c: [] for c in range(MAIN.crawls)}
    for ev in events:
        if ev["status"] == 200:
            sizes[ev["crawl"]].append(len(ev["outlinks"]))
    first, last = np.array(sizes[0]), np.array(sizes[MAIN.crawls - 1])
    assert 20 <= np.median(first) <= 60 and 20 <= first.mean() <= 60
    assert np.percentile(first, 5) >= 8
    assert abs(last.mean() / first.mean() - 1.0) < 0.2, (first.mean(), last.mean())
    assert last.max() <= 1_000


def test_www_links_count_as_internal(events: list[dict[str, Any]]) -> None:
    """Some www sites write internal links without the 'www.'; they must stay internal."""
    bare = 0
    for ev in events[: MAIN.pages]:
        host = ev["url"].split("/")[2]
        if host.startswith("www."):
            bare += sum(u.split("/")[2] == host[4:] for u in ev["outlinks"])
    assert bare > 0


# -- weekly_statistics on hand-made events -----------------------------------------------------


def _ev(url: str, crawl: int, links: list[str], status: int = 200) -> dict[str, Any]:
    return {"url": url, "crawl": crawl, "status": status, "outlinks": links}


def test_weekly_statistics_rules() -> None:
    a, b, c = "https://www.a.org/", "https://b.org/x", "https://c.org/"
    evs = [
        _ev(a, 0, ["https://a.org/1", "https://x.org/"]),
        _ev(b, 0, ["https://b.org/1"]),
        _ev(c, 0, ["https://c.org/1"]),
        # a: one new internal written without www, one http (other scheme = external), repeats
        _ev(a, 1, ["https://a.org/1", "https://a.org/2", "http://a.org/3", "https://x.org/"]),
        _ev(b, 1, [], status=404),
        _ev(c, 1, ["https://c.org/1", "https://WWW.c.org:443/2", "https://c.org/3"]),
        _ev(a, 2, ["https://a.org/1"]),
        _ev(b, 2, ["https://b.org/2"]),  # previous fetch was 404: not counted
        _ev(c, 2, ["https://c.org/1"]),
    ]
    s = weekly_statistics(evs)
    w1, w2 = s["weeks"]
    assert (w1["crawl"], w1["pages"], w2["pages"]) == (1, 2, 2)
    assert w1["new_internal_mean"] == pytest.approx(1.5)  # a: 1, c: 2
    assert w1["new_external_mean"] == pytest.approx(0.5)  # a: http://a.org/3
    assert w1["zero_internal_share"] == 0.0 and w1["zero_external_share"] == 0.5
    assert w2["new_internal_mean"] == 0.0 and w2["zero_internal_share"] == 1.0
    assert s["mean"]["never_gained_internal_share"] == 0.0
    assert s["persistence"][0]["stay_share"] == 0.0  # a: 1 -> 0, c: 1-2 -> 0
    # pooled outlinks: crawl0 a 2 (1 ext), b 1, c 1; crawl1 a 4 (2 ext), c 3; crawl2 a 1, b 1, c 1
    assert s["mean"]["external_outlink_share"] == pytest.approx(3 / 14)


# -- determinism and files ---------------------------------------------------------------------


def test_same_seed_same_events_other_seed_differs(collect_events: CollectEvents) -> None:
    small = GeneratorConfig(pages=1_500, crawls=3, seed=11, content="both")
    first = orjson.dumps(collect_events(small))
    assert first == orjson.dumps(collect_events(small))
    other = orjson.dumps(
        collect_events(GeneratorConfig(pages=1_500, crawls=3, seed=12, content="both"))
    )
    assert first != other


def test_write_events_is_byte_identical_and_round_trips(
    tmp_path: Path, collect_events: CollectEvents
) -> None:
    config = GeneratorConfig(pages=1_200, crawls=3, seed=5)
    one, two, plain = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz", tmp_path / "c.jsonl"
    summary = write_events(one, config, progress=False)
    write_events(two, config, progress=False)
    write_events(plain, config, progress=False)
    assert summary["events"] == 3_600 and summary["path"] == str(one)
    assert summary["pages"] == 1_200 and summary["crawls"] == 3 and summary["seconds"] >= 0
    assert one.read_bytes() == two.read_bytes()
    with gzip.open(one, "rb") as fh:
        unzipped = fh.read()
    assert unzipped == plain.read_bytes()
    expected = b"".join(orjson.dumps(ev) + b"\n" for ev in collect_events(config))
    assert unzipped == expected


def test_content_modes(collect_events: CollectEvents) -> None:
    for mode, present, absent in (
        ("both", {"embedding", "text"}, set()),
        ("none", set(), {"embedding", "text"}),
    ):
        evs = collect_events(
            GeneratorConfig(pages=300, crawls=2, seed=1, content=mode, embedding_dim=16)
        )
        alive = [ev for ev in evs if ev["status"] == 200]
        assert all(present <= set(ev) and not absent & set(ev) for ev in alive)
        if "embedding" in present:
            assert all(len(ev["embedding"]) == 16 for ev in alive)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        GeneratorConfig(start=datetime(2026, 1, 5))
    with pytest.raises(ValueError, match="content"):
        GeneratorConfig(content="html")
    assert GeneratorConfig(start=datetime(2026, 1, 5, tzinfo=UTC)).pages == 20_000
