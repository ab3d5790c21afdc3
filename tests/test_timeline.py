"""Timelines: validation line by line, the reading API (state at t, pages alive, births, deaths,
link appearances), windows, derivation from repeated crawls, files; and the real S-timeline
against its published statistics (skips where ../shared is absent)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import orjson
import pytest

from batch.timeline import (
    DAY,
    Timeline,
    TimelineParser,
    Version,
    parse_version,
    timeline_from_fetches,
)
from online.events import EventError, parse_event
from streams.timeline_io import EVENTS, TIMELINE, read_timeline, write_timeline

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
S_TIMELINE = SHARED / "S-timeline" / "versions.jsonl.gz"
S_CRAWLS = SHARED / "S" / "crawls.jsonl.gz"

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def record(url: str, day: float, links: list[str] | None = None, status: int = 200, **kw) -> dict:
    out = {"url": url, "at": T0 + day * DAY, "status": status, "outlinks": links or []}
    return {**out, **kw}


def build(records: list[dict], **kw) -> Timeline:
    parser = TimelineParser()
    for n, r in enumerate(records, 1):
        parser.add(orjson.dumps(r), n)
    assert not parser.rejects, parser.rejects
    return parser.timeline(**kw)


A, B, C, X = (f"https://site.org/{p}" for p in ("a", "b", "c", "x"))
EXT = "https://other.org/"


@pytest.fixture
def site() -> Timeline:
    return build(
        [
            record(A, 0, [B]),
            record(B, 0, [A]),
            record(A, 2, [B, C, EXT]),  # two appearances: C (internal) and EXT (external)
            record(C, 1.5, []),  # born before A links to it
            record(B, 3, [], status=404),  # deleted
            record(A, 4, [B, EXT]),  # C removed
            record(A, 5, [B, C, EXT]),  # C appears again: a second appearance
            record(B, 6, [A, X]),  # back; after a 404 all its links are new
        ],
        end=T0 + 10 * DAY,
    )


def test_state_at_is_the_latest_version_at_or_before_t(site: Timeline) -> None:
    assert site.state_at(A, T0 - 1) is None
    assert site.state_at(A, T0).outlinks == (B,)
    assert site.state_at(A, T0 + 2 * DAY - 1).outlinks == (B,)
    assert set(site.state_at(A, T0 + 2 * DAY).outlinks) == {B, C, EXT}
    assert site.state_at(C, T0 + DAY) is None  # not born yet
    assert site.state_at("https://site.org/never", T0 + DAY) is None
    gone = site.state_at(B, T0 + 3.5 * DAY)
    assert gone.status == 404 and not gone.ok and gone.outlinks == ()


def test_pages_alive_births_and_deaths(site: Timeline) -> None:
    assert site.alive_at(T0) == [A, B]
    assert site.alive_at(T0 + 1.6 * DAY) == [A, B, C]
    assert site.alive_at(T0 + 3.5 * DAY) == [A, C]
    assert [(e.url, e.at) for e in site.births()] == [(C, T0 + 1.5 * DAY)]
    assert [(e.url, e.at) for e in site.deaths()] == [(B, T0 + 3 * DAY)]
    assert site.sites == frozenset({"site.org"})
    assert site.days == 10.0


def test_link_appearances_count_each_return_and_nothing_in_a_first_version(
    site: Timeline,
) -> None:
    found = [
        (a.url, a.link, (a.appeared_at - T0) / DAY, a.removed_at, a.internal)
        for a in site.link_appearances()
    ]
    assert found == [
        (A, EXT, 2.0, math.inf, False),
        (A, C, 2.0, T0 + 4 * DAY, True),
        (A, C, 5.0, math.inf, True),
        (B, A, 6.0, math.inf, True),
        (B, X, 6.0, math.inf, True),
    ]


def test_changes_are_every_version_after_the_start_in_time_order(site: Timeline) -> None:
    times = [v.at for v in site.changes()]
    assert times == sorted(times) and len(times) == 6


def test_window_starts_from_each_pages_state_then(site: Timeline) -> None:
    part = site.window(T0 + 2.5 * DAY, T0 + 5.5 * DAY)
    assert part.start == T0 + 2.5 * DAY and part.end == T0 + 5.5 * DAY
    assert set(part.state_at(A, part.start).outlinks) == {B, C, EXT}
    assert part.births() == []  # C existed at the window's start
    assert [a.link for a in part.link_appearances()] == [C]  # only the day-5 return
    assert part.state_at(B, T0 + 9 * DAY).status == 404  # the day-6 version is cut


def test_end_defaults_to_whole_days_after_the_start() -> None:
    t = build([record(A, 0), record(A, 2.3, [B])])
    assert t.end == T0 + 3 * DAY


@pytest.mark.parametrize(
    ("line", "field", "reason"),
    [
        (b"not json", "$", "not JSON"),
        (b"[1, 2]", "$", "not a JSON object"),
        (b'{"url": "https://a.org/", "outlinks": []}', "at", "Field required"),
        (b'{"url": "https://a.org/", "at": "noon", "outlinks": []}', "at", ""),
        (b'{"url": "ftp://a.org/", "at": 0, "outlinks": []}', "url", "not an http(s) URL"),
        (b'{"url": "https://a.org/", "at": 1767225600, "outlinks": "x"}', "outlinks", "list"),
        (
            b'{"url": "https://a.org/", "at": 1767225600, "outlinks": [], "status": 42}',
            "status",
            "",
        ),
        (b'{"url": "https://a.org/", "fetched_at": 0, "outlinks": []}', "fetched_at", "`at`"),
        (b'{"url": "https://a.org/", "at": 0, "outlinks": []}', "at", "before the earliest"),
    ],
)
def test_a_bad_record_names_its_field(line: bytes, field: str, reason: str) -> None:
    with pytest.raises(EventError) as err:
        parse_version(line)
    assert err.value.field == field
    assert reason in err.value.reason


def test_the_parser_keeps_the_lines_around_a_bad_one_and_refuses_two_states_at_once() -> None:
    parser = TimelineParser()
    lines = [
        orjson.dumps(record(A, 1, [B])),
        b"",
        b"{broken",
        orjson.dumps(record(A, 0)),  # out of order: fine
        orjson.dumps(record(A, 1, [C])),  # same page, same time
    ]
    for n, line in enumerate(lines, 1):
        parser.add(line, n)
    assert parser.lines == 4 and parser.accepted == 2
    assert [(r.line, r.field) for r in parser.rejects] == [(3, "$"), (5, "at")]
    assert parser.rejects[0].raw == "{broken"
    assert [v.at for v in parser.timeline().versions(A)] == [T0, T0 + DAY]
    with pytest.raises(ValueError, match="no valid"):
        TimelineParser().timeline()


def test_a_version_gives_the_event_of_a_fetch_and_its_record() -> None:
    version = parse_version(orjson.dumps(record(A, 1, [B], content_digest="d1", text="hello")))
    event = version.event(T0 + 3 * DAY)
    assert event["fetched_at"] == "2026-01-04T00:00:00Z" and event["outlinks"] == [B]
    assert parse_event(event).content_digest == "d1"
    back = parse_version(version.record())
    assert back.signature == version.signature and back.at == version.at


def event(url: str, day: float, links: list[str], crawl: int | None, digest: str = "d") -> object:
    raw = {"url": url, "fetched_at": T0 + day * DAY, "outlinks": links, "content_digest": digest}
    if crawl is not None:
        raw["crawl"] = crawl
    return parse_event(raw)


@pytest.mark.parametrize("with_crawl_numbers", [True, False])
def test_a_timeline_from_repeated_crawls(with_crawl_numbers: bool) -> None:
    n = (lambda k: k) if with_crawl_numbers else (lambda k: None)
    crawls = [
        event(A, 0.0, [B], n(0)),
        event(B, 0.1, [], n(0)),
        event(A, 7.0, [B, C], n(1)),  # a change
        event(B, 7.1, [], n(1)),  # the same state: no version
        event(C, 7.2, [], n(1)),  # first seen in the second round: born then
        event(B, 14.1, [], n(2), digest="e"),  # text digest changed
    ]
    t = timeline_from_fetches(crawls)
    assert t.start == T0
    assert [v.at for v in t.versions(B)] == [T0, T0 + 14.1 * DAY]  # first round: at the start
    assert [(b.url, b.at) for b in t.births()] == [(C, T0 + 7.2 * DAY)]
    assert [(a.link, a.appeared_at) for a in t.link_appearances()] == [(C, T0 + 7 * DAY)]


def test_timeline_files_round_trip_and_events_files_are_recognised(
    site: Timeline, tmp_path: Path
) -> None:
    path = tmp_path / "t.jsonl.gz"
    assert write_timeline(site, path) == site.version_count
    read = read_timeline(path, end=site.end)
    assert read.kind == TIMELINE and not read.rejects and read.lines == site.version_count
    assert [(a.url, a.link, a.appeared_at) for a in read.timeline.link_appearances()] == [
        (a.url, a.link, a.appeared_at) for a in site.link_appearances()
    ]
    events = tmp_path / "crawls.jsonl"
    lines = [
        {"url": A, "fetched_at": T0, "outlinks": [], "crawl": 0},
        {"url": A, "fetched_at": "later", "outlinks": [], "crawl": 1},
        {"url": A, "fetched_at": T0 + 7 * DAY, "outlinks": [B], "crawl": 1},
    ]
    events.write_text("".join(json.dumps(x) + "\n" for x in lines))
    read = read_timeline(events)
    assert read.kind == EVENTS and read.lines == 3
    assert [(r.line, r.field) for r in read.rejects] == [(2, "fetched_at")]
    assert [a.link for a in read.timeline.link_appearances()] == [B]


def test_a_file_without_a_valid_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("nonsense\n{}\n")
    with pytest.raises(ValueError, match="no valid"):
        read_timeline(path)


def test_versions_of_a_page_are_kept_in_time_order() -> None:
    t = Timeline(
        {
            A: [
                Version.of(parse_event({"url": A, "fetched_at": T0 + d, "outlinks": []}))
                for d in (5.0, 1.0, 3.0)
            ]
        }
    )
    assert [v.at for v in t.versions(A)] == [T0 + 1, T0 + 3, T0 + 5]


@pytest.fixture(scope="module")
def s_timeline() -> Timeline:
    if not S_TIMELINE.exists():
        pytest.skip(f"{S_TIMELINE} is absent (development data, not shipped)")
    read = read_timeline(S_TIMELINE)
    assert not read.rejects
    return read.timeline


def test_s_timeline_has_the_published_counts(s_timeline: Timeline) -> None:
    stats = json.loads((S_TIMELINE.parent / "stats.json").read_text())
    appearances = s_timeline.link_appearances()
    assert s_timeline.version_count == stats["version_count"]
    assert len(s_timeline.urls) == stats["pages_ever"]
    assert len(s_timeline.alive_at(s_timeline.start)) == stats["pages_at_start"]
    assert len(s_timeline.alive_at(s_timeline.end)) == stats["pages_alive_at_end"]
    assert len(s_timeline.births()) == stats["pages_born"]
    assert len(s_timeline.deaths()) == stats["pages_deleted"]
    assert len(appearances) == stats["link_appearances"]
    assert sum(a.internal for a in appearances) == stats["link_appearances_internal"]
    assert sum(not a.internal for a in appearances) == stats["link_appearances_external"]
    for week in stats["weeks"]:
        lo = s_timeline.start + week["week"] * 7 * DAY
        inside = [a for a in appearances if lo <= a.appeared_at < lo + 7 * DAY]
        assert sum(a.internal for a in inside) == week["new_internal"]
        assert sum(not a.internal for a in inside) == week["new_external"]


def test_s_crawls_give_the_s_timelines_states_at_their_weekly_points(s_timeline: Timeline) -> None:
    """The README says S-timeline gives exactly S's outlinks at S's 12 weekly points; the
    timeline derived from S's crawls must agree with it there."""
    if not S_CRAWLS.exists():
        pytest.skip(f"{S_CRAWLS} is absent (development data, not shipped)")
    with gzip.open(S_CRAWLS, "rb") as fh:
        pages = [parse_event(line) for line in fh]
    derived = timeline_from_fetches(pages)
    points = sorted({p.timestamp for p in pages})
    assert len(points) == 12
    for t in points[1:]:
        for url in derived.alive_at(t):
            assert derived.state_at(url, t).links == s_timeline.state_at(url, t).links, (url, t)
