"""The closed loop: a crawler recrawls a site's timeline under a fetch budget.

The crawler starts with an index as a full crawl at the window's start would leave it: the
pages alive then and the URLs of the site they link to (a link to a page that does not exist
is known as a 404), each fetched once at the start (the seed crawl, outside the budget: every
policy starts from the same index). It then
fetches at most ``per_day`` pages a day, in evenly spaced slots (slot k at start + k / per_day
days). A fetch at t returns the page's state at t (`Timeline.state_at`; a URL with no state
then, such as a link to a page not yet born or never made, returns a 404), as the fetched-page
event a crawler would send. Links on a fetched page to URLs of the site the crawler does not
know yet are discovered then and join the index; links to other hosts are counted (see
`batch.discovery`) but not followed.

Decisions are taken per cycle (``cycle_hours``, default 1): at a cycle's start the policy
orders the pages using only what fetches before that moment returned, the cycle's slots go to
the pages in that order, and the policy learns the cycle's fetches (policies that run the
pipeline get them as one batch, which the pipeline processes as if one at a time). Pages
discovered in a cycle are fetched from the next one on.

Politeness: ``politeness_seconds`` is the least gap between two fetches of one host. A slot
whose candidates' hosts all fetched less than the gap ago stays unused, so on a single-host
site a gap longer than the slot spacing (1 day / budget) caps the fetches at one per gap:
the budget then is never reached.

Deterministic for a seed: ties between pages are broken by a random order drawn from it.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from batch.policies import Fetched, Policy, Universe
from batch.timeline import DAY, Timeline, Version
from online.events import FetchedPage, parse_event
from online.fetch import Fetch, prepare
from online.links import InvalidURL, link_info

#: ``origin`` of a fetched URL in the fetch log: in the index at the start, or found by a fetch
KNOWN, DISCOVERED = "known", "discovered"


@dataclass(frozen=True)
class Budget:
    """Fetches a day: an absolute number (``125``) or a share of the pages alive at the
    window's start (``5%``), fixed for the whole run.

    >>> Budget.parse("5%").per_day(2412), Budget.parse("125").per_day(2412)
    (120.6, 125.0)
    >>> Budget.parse("5%").label
    '5%'
    """

    value: float
    percent: bool

    @classmethod
    def parse(cls, text: str) -> Budget:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%?)\s*", text)
        if match is None:
            raise ValueError(f"budget {text!r}: expected a number of fetches a day or a percentage")
        value = float(match.group(1))
        if value <= 0 or (match.group(2) and value > 1000):
            raise ValueError(f"budget {text!r}: must be positive (at most 1000%)")
        return cls(value, bool(match.group(2)))

    def per_day(self, pages_at_start: int) -> float:
        return self.value * pages_at_start / 100.0 if self.percent else self.value

    @property
    def label(self) -> str:
        number = f"{self.value:g}"
        return f"{number}%" if self.percent else number


@dataclass(frozen=True)
class SimulationConfig:
    cycle_hours: float = 1.0
    politeness_seconds: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.cycle_hours > 0:
            raise ValueError("cycle_hours must be positive")
        if self.politeness_seconds < 0:
            raise ValueError("politeness_seconds must not be negative")


@dataclass
class FetchLog:
    """A crawl's budgeted fetches in time order: page (of the universe), time, and whether the
    URL was in the index at the start (``known``) or found during the crawl (``discovered``)."""

    pages: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    discovered: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.pages)

    def add(self, pages: np.ndarray, times: np.ndarray, discovered: np.ndarray) -> None:
        self.pages.extend(pages.tolist())
        self.times.extend(times.tolist())
        self.discovered.extend(discovered.tolist())


def build_universe(timeline: Timeline) -> Universe:
    """Every URL a crawl of ``timeline`` can know (see `Universe`), the timeline's pages first."""
    sites = timeline.sites
    urls = list(timeline.urls)
    index = {url: i for i, url in enumerate(urls)}
    for url in timeline.urls:
        for version in timeline.versions(url):
            for link in sorted(version.links):
                if link not in index and _site(link) in sites:
                    index[link] = len(urls)
                    urls.append(link)
    site_ids: dict[str, int] = {}
    site_of = np.array([site_ids.setdefault(_site(u) or "", len(site_ids)) for u in urls])
    alive = np.zeros(len(urls), dtype=bool)
    alive[[index[u] for u in timeline.alive_at(timeline.start)]] = True
    known = alive.copy()  # and the site's URLs the live pages link to (some are 404s)
    for url in np.array(urls)[alive].tolist():
        state = timeline.state_at(url, timeline.start)
        known[[index[link] for link in state.links if link in index]] = True  # type: ignore[union-attr]
    return Universe(timeline, urls, index, site_of, known, int(alive.sum()))


def _site(url: str) -> str | None:
    try:
        return link_info(url).site
    except InvalidURL:
        return None


class _Site:
    """What fetches return, and what the crawler saw of each page last."""

    def __init__(self, universe: Universe) -> None:
        self.universe = universe
        self.timeline = universe.timeline
        self._events: dict[int, Fetch] = {}  # prepared event per version / missing page
        self._missing: dict[int, FetchedPage] = {}
        self.last_seen: list[Version | None] = [None] * universe.size
        self.last_ok_links: list[frozenset[str] | None] = [None] * universe.size
        self.fetched = np.zeros(universe.size, dtype=bool)

    def fetch(self, pages: np.ndarray, times: np.ndarray) -> Fetched:
        n = len(pages)
        ok = np.zeros(n, dtype=bool)
        first = ~self.fetched[pages]
        changed = np.zeros(n, dtype=bool)
        new_links = np.zeros(n, dtype=np.int64)
        versions: list[Version | None] = []
        events: list[Fetch] = []
        urls = self.universe.urls
        for k, (page, t) in enumerate(zip(pages.tolist(), times.tolist(), strict=True)):
            version = self.timeline.state_at(urls[page], t)
            versions.append(version)
            events.append(replace(self._event(page, version), timestamp=t))
            before = self.last_seen[page]
            if not first[k]:
                changed[k] = (before.signature if before else None) != (
                    version.signature if version else None
                )
            if version is not None and version.ok:
                ok[k] = True
                seen = self.last_ok_links[page]
                if seen is not None:
                    new_links[k] = len(version.links - seen)
                self.last_ok_links[page] = version.links
            self.last_seen[page] = version
        self.fetched[pages] = True
        return Fetched(pages, times, ok, first, changed, new_links, versions, events)

    def _event(self, page: int, version: Version | None) -> Fetch:
        key = id(version) if version is not None else -1 - page
        event = self._events.get(key)
        if event is None:
            if version is None:
                url = self.universe.urls[page]
                raw = {"url": url, "fetched_at": self.timeline.start, "status": 404, "outlinks": []}
                event = prepare(parse_event(raw))
            else:
                event = prepare(version.page)
            self._events[key] = event
        return event


def slot_times(start: float, end: float, per_day: float) -> np.ndarray:
    """Evenly spaced fetch slots: start + k / per_day days, k = 1, 2, ... up to ``end``."""
    spacing = DAY / per_day
    count = math.floor((end - start) / spacing + 1e-9)
    return start + spacing * np.arange(1, count + 1)


def simulate(
    universe: Universe,
    policy: Policy,
    per_day: float,
    config: SimulationConfig | None = None,
    *,
    progress: Callable[[float], None] | None = None,
) -> FetchLog:
    """Crawl ``universe``'s timeline with ``policy`` at ``per_day`` fetches a day; the log of
    the budgeted fetches. ``progress`` is called with the share of the window done."""
    config = config or SimulationConfig()
    if not per_day > 0:
        raise ValueError(
            f"a budget of {per_day:g} fetches a day: it must be positive (a percentage is of "
            f"the pages alive at the window's start: {universe.pages_at_start} here)"
        )
    timeline = universe.timeline
    rng = np.random.default_rng(config.seed)
    tiebreak = rng.permutation(universe.size)
    site = _Site(universe)
    known = universe.known_at_start.copy()
    new_pages: deque[int] = deque()
    log = FetchLog()
    gap = config.politeness_seconds
    host_free = np.full(int(universe.hosts.max()) + 1, -np.inf)

    policy.start(universe)
    seed = np.flatnonzero(known)
    fetched = site.fetch(seed, np.full(len(seed), timeline.start))
    policy.observe(fetched)
    _discover(fetched, universe, known, new_pages)

    slots = slot_times(timeline.start, timeline.end, per_day)
    cycle = config.cycle_hours * 3600.0
    bounds = np.searchsorted(
        slots, timeline.start + cycle * np.arange(1, _cycles(timeline, cycle) + 1)
    )
    bounds[-1] = len(slots)  # the last cycle takes the slot at the window's end
    lo = 0
    for hi in bounds.tolist():
        if hi <= lo:
            continue
        times = slots[lo:hi]
        lo = hi
        ranked = _ranked(policy.priority(float(times[0])), site.fetched & known, tiebreak)
        fresh = _take_new(new_pages, int(policy.new_page_share * len(times)))
        pages, when = _assign(fresh, ranked, times, universe.hosts, host_free, gap)
        left = set(fresh).difference(pages.tolist())  # kept from their slots by politeness
        new_pages.extendleft(reversed([p for p in fresh if p in left]))
        if not len(pages):
            continue
        discovered = ~universe.known_at_start[pages]
        fetched = site.fetch(pages, when)
        log.add(pages, when, discovered)
        policy.observe(fetched)
        _discover(fetched, universe, known, new_pages)
        if progress is not None:
            progress((float(times[-1]) - timeline.start) / (timeline.end - timeline.start))
    return log


def _cycles(timeline: Timeline, cycle: float) -> int:
    return math.ceil((timeline.end - timeline.start) / cycle)


def _ranked(priority: np.ndarray, candidates: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """Candidate pages, highest priority first (ties in the seeded random order), without
    those the policy will not fetch."""
    pages = np.flatnonzero(candidates & (priority > -np.inf))
    order = np.lexsort((tiebreak[pages], -priority[pages]))
    return pages[order]


def _take_new(new_pages: deque[int], most: int) -> list[int]:
    return [new_pages.popleft() for _ in range(min(most, len(new_pages)))]


def _assign(
    fresh: list[int],
    ranked: np.ndarray,
    times: np.ndarray,
    hosts: np.ndarray,
    host_free: np.ndarray,
    gap: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The cycle's fetches: new pages first, then the ranked recrawls, each page once, one per
    slot, and no host fetched again within ``gap`` seconds (a slot no page can take stays
    unused)."""
    n = len(times)
    if gap <= 0:
        chosen = list(fresh)
        taken = set(chosen)
        for page in ranked[: n + len(taken)].tolist():
            if len(chosen) == n:
                break
            if page not in taken:
                chosen.append(page)
        return np.array(chosen, dtype=np.int64), times[: len(chosen)]
    # Per host, its candidates in the cycle's order; each slot takes the best-placed
    # candidate among the hosts free at that time.
    by_host: dict[int, deque[tuple[int, int]]] = {}
    seen: set[int] = set()
    for position, page in enumerate([*fresh, *ranked.tolist()]):
        if page not in seen:
            seen.add(page)
            by_host.setdefault(int(hosts[page]), deque()).append((position, page))
    pages, when = [], []
    for t in times.tolist():
        free = [h for h, queue in by_host.items() if queue and host_free[h] <= t]
        if not free:
            continue
        host = min(free, key=lambda h: by_host[h][0][0])
        _, page = by_host[host].popleft()
        host_free[host] = t + gap
        pages.append(page)
        when.append(t)
    return np.array(pages, dtype=np.int64), np.array(when, dtype=np.float64)


def _discover(
    fetched: Fetched, universe: Universe, known: np.ndarray, new_pages: deque[int]
) -> None:
    """Links to unknown in-scope URLs on the fetched pages join the index, in fetch order."""
    index = universe.index
    for version in fetched.versions:
        if version is None or not version.ok:
            continue
        for link in sorted(version.links):
            page = index.get(link)
            if page is not None and not known[page]:
                known[page] = True
                new_pages.append(page)
