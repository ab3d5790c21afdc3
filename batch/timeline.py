"""Timelines: every version of every page of a site over a window, the ground truth a closed-loop
crawl simulation fetches from.

A timeline record is a fetched-page event (the event contract of `online.events`) with ``at``,
the time the page took that state, in place of ``fetched_at``. The page's state at time t is
its latest version with ``at`` <= t; before its first version a page does not exist. A version
with a non-2xx status is a deleted page (a 404 has no outlinks).

* `TimelineParser` validates records line by line, like events: a bad line becomes a
  `TimelineReject` naming the field and the reason, and the lines around it are kept.
* `Timeline` answers what a crawler or a test site needs: `Timeline.state_at` (what a fetch at
  t returns), `Timeline.alive_at`, `Timeline.births`, `Timeline.deaths`, and the link
  appearances a recrawl policy is judged on (`Timeline.link_appearances`).
* `timeline_from_fetches` derives a timeline from repeated crawls (each crawl's state valid
  until the next), so any crawl history can be simulated.

File I/O lives in `streams.timeline_io`.

>>> parser = TimelineParser()
>>> lines = [
...     b'{"url": "https://a.org/", "at": "2026-01-01T00:00:00Z", "outlinks": ["https://a.org/x"]}',
...     b'{"url": "https://a.org/", "at": "2026-01-03T00:00:00Z",'
...     b' "outlinks": ["https://a.org/x", "https://b.org/"]}',
...     b'{"url": "https://a.org/x", "at": "2026-01-02T00:00:00Z", "outlinks": []}',
...     b'{"url": "https://a.org/y", "at": "yesterday", "outlinks": []}',
... ]
>>> for number, line in enumerate(lines, 1):
...     parser.add(line, number)
>>> timeline = parser.timeline()
>>> [(r.line, r.field) for r in parser.rejects]
[(4, 'at')]
>>> day = 86_400.0
>>> timeline.state_at("https://a.org/", timeline.start + 2 * day).outlinks
('https://a.org/x', 'https://b.org/')
>>> timeline.alive_at(timeline.start + day / 2)
['https://a.org/']
>>> [(b.url, (b.at - timeline.start) / day) for b in timeline.births()]
[('https://a.org/x', 1.0)]
>>> [(a.link, a.internal, (a.appeared_at - timeline.start) / day)
...  for a in timeline.link_appearances()]
[('https://b.org/', False, 2.0)]
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from itertools import pairwise
from typing import Any

import orjson

from online.events import EventError, FetchedPage, iso_utc, parse_event
from online.links import InvalidURL, is_internal, link_info

DAY = 86_400.0
#: Fields of the event contract a timeline record may not carry: its time is ``at``.
_NOT_IN_TIMELINE = ("fetched_at",)


@dataclass(frozen=True, slots=True)
class Version:
    """One state of one page, valid from ``at`` (epoch seconds) until the page's next version.

    ``page`` is the validated event a fetch in that state returns (its ``fetched_at`` is
    ``at``; `Version.event` gives the event of a fetch at any later time).
    """

    url: str
    at: float
    page: FetchedPage
    #: the outlinks as a set (empty for a non-2xx page)
    links: frozenset[str]
    #: what a crawler's change detection compares: status, content digest, outlinks, text
    signature: tuple

    @classmethod
    def of(cls, page: FetchedPage, at: float | None = None) -> Version:
        """The version ``page`` describes, valid from ``at`` (default: its ``fetched_at``)."""
        when = page.timestamp if at is None else at
        if at is not None:
            page = page.model_copy(update={"fetched_at": datetime.fromtimestamp(at, UTC)})
        links = frozenset(page.outlinks) if page.ok else frozenset()
        return cls(
            page.url, when, page, links, (page.status, page.content_digest, links, page.text)
        )

    @property
    def status(self) -> int:
        return self.page.status

    @property
    def ok(self) -> bool:
        """A live page (2xx); anything else reads as deleted."""
        return self.page.ok

    @property
    def outlinks(self) -> tuple[str, ...]:
        return tuple(self.page.outlinks) if self.page.ok else ()

    def event(self, fetched_at: float) -> dict[str, Any]:
        """The fetched-page event (JSON-ready dict) a fetch of this state at ``fetched_at``
        returns."""
        out = self.page.model_dump(mode="json", exclude_none=True, exclude={"fetched_at"})
        out["fetched_at"] = iso_utc(fetched_at)
        return out

    def record(self) -> dict[str, Any]:
        """The timeline record of this version (JSON-ready dict)."""
        out = self.page.model_dump(mode="json", exclude_none=True, exclude={"fetched_at", "crawl"})
        return {"url": out.pop("url"), "at": iso_utc(self.at), **out}


@dataclass(frozen=True, slots=True)
class PageEvent:
    """A page's birth (first version after the window's start) or death (a non-2xx version
    after a live one)."""

    url: str
    at: float


@dataclass(frozen=True, slots=True)
class LinkAppearance:
    """A link present in one version of a page and absent from the page's version before it
    (a page's first version counts none). ``removed_at`` is when a later version lacks it
    again (infinity if it stays until the end)."""

    url: str
    link: str
    appeared_at: float
    removed_at: float
    internal: bool


class Timeline:
    """Every version of every page over a window [``start``, ``end``] (epoch seconds).

    ``versions`` maps a URL to its versions in time order. ``end`` defaults to the last
    version's time rounded up to a whole number of days after ``start``.
    """

    def __init__(
        self,
        versions: Mapping[str, Iterable[Version]],
        *,
        start: float | None = None,
        end: float | None = None,
    ) -> None:
        by_url = {url: sorted(vs, key=lambda v: v.at) for url, vs in versions.items()}
        self._versions: dict[str, tuple[Version, ...]] = {
            url: tuple(vs) for url, vs in sorted(by_url.items()) if vs
        }
        if not self._versions:
            raise ValueError("a timeline needs at least one version")
        first = min(vs[0].at for vs in self._versions.values())
        last = max(vs[-1].at for vs in self._versions.values())
        self.start = first if start is None else float(start)
        if end is None:
            end = self.start + max(math.ceil((last - self.start) / DAY), 1) * DAY
        self.end = float(end)
        if self.end <= self.start:
            raise ValueError("the window must end after it starts")
        self._times = {url: [v.at for v in vs] for url, vs in self._versions.items()}

    def __repr__(self) -> str:
        return (
            f"Timeline({len(self._versions)} pages, {self.version_count} versions, "
            f"{iso_utc(self.start)} .. {iso_utc(self.end)})"
        )

    # -- reading -----------------------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        """Every URL that has a version, sorted."""
        return list(self._versions)

    @property
    def version_count(self) -> int:
        return sum(len(vs) for vs in self._versions.values())

    @property
    def days(self) -> float:
        return (self.end - self.start) / DAY

    @cached_property
    def sites(self) -> frozenset[str]:
        """The sites (hosts, a leading ``www.`` ignored) of the timeline's pages: the scope of
        a crawl of it."""
        return frozenset(link_info(url).site for url in self._versions)

    def versions(self, url: str) -> tuple[Version, ...]:
        """The versions of ``url`` in time order (empty if it has none)."""
        return self._versions.get(url, ())

    def state_at(self, url: str, t: float) -> Version | None:
        """What a fetch of ``url`` at ``t`` returns: its latest version with ``at`` <= t, or
        None if the page has no version yet (or never has one)."""
        times = self._times.get(url)
        if times is None:
            return None
        at = bisect.bisect_right(times, t) - 1
        return self._versions[url][at] if at >= 0 else None

    def alive_at(self, t: float) -> list[str]:
        """URLs whose state at ``t`` is a live (2xx) page, sorted."""
        return [url for url in self._versions if (v := self.state_at(url, t)) and v.ok]

    def births(self) -> list[PageEvent]:
        """Pages that first appear after the window's start, in time order."""
        born = [
            PageEvent(url, vs[0].at) for url, vs in self._versions.items() if vs[0].at > self.start
        ]
        return sorted(born, key=lambda e: (e.at, e.url))

    def deaths(self) -> list[PageEvent]:
        """Live pages that become non-2xx (deleted), in time order; a page that dies, comes
        back and dies again counts twice."""
        out = [
            PageEvent(url, cur.at)
            for url, vs in self._versions.items()
            for prev, cur in pairwise(vs)
            if prev.ok and not cur.ok
        ]
        return sorted(out, key=lambda e: (e.at, e.url))

    def changes(self) -> Iterator[Version]:
        """Every version after the window's start, in time order (births, edits, deaths)."""
        later = [v for vs in self._versions.values() for v in vs if v.at > self.start]
        return iter(sorted(later, key=lambda v: (v.at, v.url)))

    def link_appearances(self) -> list[LinkAppearance]:
        """Every link appearance in the window, in time order (see `LinkAppearance`)."""
        out: list[LinkAppearance] = []
        for url, versions in self._versions.items():
            open_since: dict[str, float] = {}
            for k, version in enumerate(versions):
                previous = versions[k - 1].links if k else None
                for link in version.links.difference(open_since):
                    if previous is not None and version.at <= self.end:
                        open_since[link] = version.at
                    else:
                        open_since[link] = -math.inf  # there from the first version
                for link in [link for link in open_since if link not in version.links]:
                    appeared = open_since.pop(link)
                    if appeared > -math.inf:
                        out.append(self._appearance(url, link, appeared, version.at))
            for link, appeared in open_since.items():
                if appeared > -math.inf:
                    out.append(self._appearance(url, link, appeared, math.inf))
        return sorted(out, key=lambda a: (a.appeared_at, a.url, a.link))

    @staticmethod
    def _appearance(url: str, link: str, appeared: float, removed: float) -> LinkAppearance:
        try:
            internal = is_internal(url, link)
        except InvalidURL:
            internal = False
        return LinkAppearance(url, link, appeared, removed, internal)

    # -- derived timelines --------------------------------------------------------------------

    def window(self, start: float, end: float) -> Timeline:
        """The same site over [start, end]: each page's state at ``start`` becomes its first
        version there, versions after ``end`` are dropped."""
        if not self.start <= start < end:
            raise ValueError("the window must start within the timeline and end after it starts")
        kept: dict[str, list[Version]] = {}
        for url, versions in self._versions.items():
            current = self.state_at(url, start)
            vs = [] if current is None else [Version.of(current.page, start)]
            vs += [v for v in versions if start < v.at <= end]
            if vs:
                kept[url] = vs
        return Timeline(kept, start=start, end=end)


@dataclass(frozen=True, slots=True)
class TimelineReject:
    """A timeline line that failed validation: its line number, field, reason and raw text."""

    line: int
    field: str
    reason: str
    raw: str

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "field": self.field, "reason": self.reason, "raw": self.raw}


class TimelineParser:
    """Validates timeline records one line at a time and builds the `Timeline`.

    A record is a fetched-page event with ``at`` in place of ``fetched_at``; a second version
    of a page at the same ``at`` is rejected (which state would a fetch see?). Lines may come
    in any order: versions are sorted per page.
    """

    def __init__(self) -> None:
        self.rejects: list[TimelineReject] = []
        self.lines = 0
        self._versions: dict[str, dict[float, Version]] = {}

    def add(self, raw: bytes | str, line: int) -> None:
        """Validate one line (blank lines are skipped); a bad one goes to ``rejects``."""
        if not raw.strip():
            return
        self.lines += 1
        try:
            version = parse_version(raw)
        except EventError as err:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            self.rejects.append(TimelineReject(line, err.field, err.reason, text.rstrip("\n")))
            return
        known = self._versions.setdefault(version.url, {})
        if version.at in known:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            reason = "a second version of this page at the same time"
            self.rejects.append(TimelineReject(line, "at", reason, text.rstrip("\n")))
            return
        known[version.at] = version

    @property
    def accepted(self) -> int:
        return sum(len(vs) for vs in self._versions.values())

    def timeline(self, *, start: float | None = None, end: float | None = None) -> Timeline:
        """The timeline of the accepted versions; ValueError if there are none."""
        if not self._versions:
            raise ValueError("no valid timeline record")
        return Timeline(
            {u: list(vs.values()) for u, vs in self._versions.items()}, start=start, end=end
        )


def parse_version(raw: bytes | str | Mapping[str, Any]) -> Version:
    """One timeline record as a `Version`; raises EventError naming the field."""
    if isinstance(raw, Mapping):
        data: Any = dict(raw)
    else:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise EventError("$", f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise EventError("$", "not a JSON object")
    for name in _NOT_IN_TIMELINE:
        if name in data:
            raise EventError(name, "a timeline record has `at`, not `fetched_at`")
    if "at" not in data:
        raise EventError("at", "Field required")
    data["fetched_at"] = data.pop("at")
    try:
        page = parse_event(data)
    except EventError as err:
        if err.field == "fetched_at":
            raise EventError("at", err.reason) from None
        raise
    return Version.of(page)


def timeline_from_fetches(pages: Iterable[FetchedPage], *, end: float | None = None) -> Timeline:
    """A timeline from repeated crawls: each fetch's state holds until the page's next fetch.

    The first round of the crawl (the events with the lowest ``crawl`` number; without crawl
    numbers, every event before the first URL fetched a second time) is the state at the
    window's start, its first fetch time; a page first fetched in a later round is born at
    that fetch. A fetch that shows the same state as the page's previous one adds no version.

    >>> e = lambda url, day, links, crawl: parse_event({"url": url,
    ...     "fetched_at": (20454 + day) * 86400, "outlinks": links, "crawl": crawl})
    >>> t = timeline_from_fetches([e("https://a.org/", 0, [], 0), e("https://a.org/b", 0.1, [], 0),
    ...     e("https://a.org/", 7, ["https://a.org/c"], 1), e("https://a.org/b", 7.1, [], 1),
    ...     e("https://a.org/c", 7.2, [], 1)])
    >>> [(v.url, round(v.at / 86400 - 20454, 6)) for v in t.changes()]
    [('https://a.org/', 7.0), ('https://a.org/c', 7.2)]
    """
    fetches = list(pages)
    if not fetches:
        raise ValueError("no valid event to build a timeline from")
    first_round = _first_round(fetches)
    start = min(fetches[i].timestamp for i in first_round)
    by_url: dict[str, list[FetchedPage]] = {}
    for page in sorted(fetches, key=lambda p: p.timestamp):
        by_url.setdefault(page.url, []).append(page)
    versions: dict[str, list[Version]] = {}
    in_first = {fetches[i].url for i in first_round}
    for url, seen in by_url.items():
        kept: list[Version] = []
        for k, page in enumerate(seen):
            version = Version.of(page, start if k == 0 and url in in_first else None)
            if kept and version.signature == kept[-1].signature:
                continue
            if kept and version.at == kept[-1].at:
                kept[-1] = version
                continue
            kept.append(version)
        versions[url] = kept
    return Timeline(versions, start=start, end=end)


def _first_round(fetches: list[FetchedPage]) -> list[int]:
    """Positions of the events of the first crawl round (see `timeline_from_fetches`)."""
    crawls = [p.crawl for p in fetches if p.crawl is not None]
    if crawls:
        first = min(crawls)
        return [i for i, p in enumerate(fetches) if p.crawl == first]
    order = sorted(range(len(fetches)), key=lambda i: fetches[i].timestamp)
    seen: set[str] = set()
    for k, i in enumerate(order):
        if fetches[i].url in seen:
            return order[:k]
        seen.add(fetches[i].url)
    return order
