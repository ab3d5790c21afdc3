"""The living test site (streams/living_site.py): a timeline served over real HTTP, each page
as it is at the clock's time; what a crawler parses back is the timeline's page; the clock,
the seeds and the log of what it served."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from batch.timeline import TimelineParser
from online.html import parse_html
from streams.clock import FastClock, clock_from_url
from streams.living_site import LivingSite

DAY = 86_400.0
T0 = 1_767_225_600  # 2026-01-01: the contract accepts no time before 1990
T1, T2 = T0 + 2 * DAY, T0 + 4 * DAY
LINES = [
    f'{{"url": "https://www.site.org/", "at": {T0}, "outlinks": ["https://www.site.org/a/",'
    f' "https://other.org/x?q=1", "https://www.site.org/caf\u00e9/"], "text": "Home & <more>"}}',
    f'{{"url": "https://www.site.org/a/", "at": {T0}, "outlinks": [], "text": "A"}}',
    f'{{"url": "https://www.site.org/caf\u00e9/", "at": {T0}, "outlinks": [],'
    ' "text": "Caf\u00e9"}',
    f'{{"url": "https://www.site.org/", "at": {T1}, "outlinks": ["https://www.site.org/a/",'
    f' "https://www.site.org/new/"], "text": "Home"}}',
    f'{{"url": "https://www.site.org/new/", "at": {T1}, "outlinks": [], "text": "New"}}',
    f'{{"url": "https://www.site.org/a/", "at": {T2}, "status": 404, "outlinks": []}}',
]


@pytest.fixture
def timeline():
    parser = TimelineParser()
    for number, line in enumerate(LINES, 1):
        parser.add(line, number)
    assert not parser.rejects
    return parser.timeline(end=T0 + 10 * DAY)


def frozen(t: float) -> FastClock:
    """A clock that stays at ``t`` for the length of a test."""
    return FastClock(start=t, origin=time.time(), speed=1e-9)


def test_pages_as_they_are_at_the_clocks_time(timeline):
    site = LivingSite(timeline, clock=frozen(T0 + 1 * DAY))
    try:
        status, headers, body = site.answer("/")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        page = parse_html(body, site.base_url + "/")
        # What a crawler parses back is the timeline's page, on this server.
        assert page.outlinks == [
            site.base_url + "/a/",
            "https://other.org/x?q=1",
            site.base_url + "/caf%C3%A9/",
        ]
        assert page.text == "Home & <more>"
        assert b'<base href="/">' in body and b'href="a/"' in body  # relative to the base
        assert site.answer("/new/")[0] == 404  # not born yet
        assert site.answer("/caf%C3%A9/")[0] == 200  # a crawler's safe URL finds the page
        assert site.answer("/nowhere/")[0] == 404
        moved = site.answer("/a?x=1")  # the trailing slash added, as static sites do
        assert moved[0] == 301 and moved[1]["Location"] == "/a/?x=1"
    finally:
        site.server_close()
    later = LivingSite(timeline, clock=frozen(T0 + 5 * DAY))
    try:
        assert later.answer("/new/")[0] == 200  # born on day 2
        assert later.answer("/a/")[0] == 404  # died on day 4
        assert parse_html(later.answer("/")[2], later.base_url + "/").outlinks == [
            later.base_url + "/a/",
            later.base_url + "/new/",
        ]
        # Every page request is in the log, by its timeline URL, at the clock's time.
        assert [(s.url, s.status) for s in later.served] == [
            ("https://www.site.org/new/", 200),
            ("https://www.site.org/a/", 404),
            ("https://www.site.org/", 200),
        ]
        assert all(abs(s.at - (T0 + 5 * DAY)) < 1 for s in later.served)
    finally:
        later.server_close()


def test_over_http_with_the_clock_and_the_seeds(timeline, tmp_path):
    log = tmp_path / "served.jsonl"
    site = LivingSite(timeline, day_seconds=0.5, log=log).start()
    try:
        clock = clock_from_url(site.base_url + "/_clock")
        assert clock.speed == 2 * DAY and clock.start == timeline.start
        assert abs(clock.now() - site.clock.now()) < 1e-6 * DAY + 60
        with urllib.request.urlopen(site.base_url + "/sitemap.xml") as resp:
            sitemap = resp.read().decode()
        assert sitemap.count("<loc>") == 3 and "/new/" not in sitemap  # alive at the start
        with urllib.request.urlopen(site.base_url + "/robots.txt") as resp:
            assert b"Allow: /" in resp.read()
        with urllib.request.urlopen(site.base_url + "/") as resp:
            assert resp.status == 200 and b"Home" in resp.read()
        time.sleep(1.2)  # more than two simulated days: /new/ is born
        with urllib.request.urlopen(site.base_url + "/new/") as resp:
            assert resp.status == 200
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(site.base_url + "/nowhere/")
        assert gone.value.code == 404
    finally:
        site.close()
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["url"].rsplit("/", 2)[-2] for r in logged] == ["www.site.org", "new", "nowhere"]
    assert logged[1]["at"] >= timeline.start + 2 * DAY


def test_one_site_is_served(timeline):
    with pytest.raises(ValueError, match="no page of"):
        LivingSite(timeline, site="elsewhere.org")
    with pytest.raises(ValueError, match="speed"):
        FastClock(0, 0, 0)
