"""Recrawl policies for the closed-loop simulation (`batch.simulate`), each a small class behind
one interface: `Policy.start` once, then `Policy.priority` before each fetch cycle (higher
first; ``-inf``: do not fetch) and `Policy.observe` after it, with what the cycle's fetches
returned. A policy sees only what its own crawl fetched, except the oracle.

Every policy spends its whole budget (a slot goes to the best page by the policy's order, due
or not), so policies compare at equal cost; the oracle alone leaves a slot unused when no page
has a link waiting. New pages (URLs discovered by a fetch and never fetched) take the slots
first, in the order they were found: their first fetch is what discovery is for, and there are
few of them next to the recrawls (``new_page_share`` caps their share of a cycle's slots).

Policies:

* `UniformPolicy` (``uniform``): round-robin, the page fetched longest ago first.
* `AdaptivePolicy` (``adaptive``): the rule production crawlers ship, Apache Nutch's
  AdaptiveFetchSchedule (StormCrawler's AdaptiveScheduler is the same rule): the interval
  grows by ``inc_rate`` when a fetch finds the page unchanged, shrinks by ``dec_rate`` when it
  changed, within bounds; pages are fetched in order of their next fetch time. Constants are
  Nutch's defaults (``conf/nutch-default.xml``): ``db.fetch.interval.default`` 30 days,
  ``db.fetch.schedule.adaptive.inc_rate`` 0.4, ``dec_rate`` 0.2, ``min_interval`` 60 s,
  ``max_interval`` 365 days capped by ``db.fetch.interval.max`` 90 days. ``sync_delta`` is
  left out (its reference time can land in the past: NUTCH-1564).
* `ChangeRatePolicy` (``change-rate``): the page's change rate from its own fetches, by Cho &
  Garcia-Molina's estimator for incomplete observation ("Estimating frequency of change", ACM
  TOIT 2003): λ = −log((n − X + 0.5) / (n + 0.5)) / Ī for X changes seen in n intervals of mean
  length Ī, clamped to [0.0005, 7] a day as in Kolobov et al. (NeurIPS 2019); fetch rates
  ∝ √(value × λ), the square-root rule of optimal recrawl (Azar et al., PNAS 2018; Kolobov et
  al. 2019), every page of value 1.
* `NNLAveragePolicy` (``nnl-av``): the paper's NNL-Av baseline as a rate, new outlinks per day
  over the page's last ``history`` intervals, allocated as ``lookaround`` allocates.
* `LookaroundPolicy` (``lookaround``): the default scorer's ``rate_per_day`` as the pipeline
  publishes it, allocated to the budget.
* `OraclePolicy` (``oracle``): knows the timeline; fetches the pages with the most links
  waiting (present now, absent at the page's last fetch), the longest waiting first.

A rate ``r`` becomes an order by `rate_priority`: r^exponent × (time since the last fetch).
With exponent 1 that is the greedy rule "the most expected new links since the last fetch";
with 1/2 a page is fetched when √r × age reaches the cycle's threshold, i.e. every c / √r
days: fetch rates ∝ √r, the square-root allocation, its multiplier set by the budget.

>>> rate_priority(np.array([4.0, 1.0, 0.0]), np.array([1.0, 3.0, 30.0]), 0.5, floor=0.0)
array([2., 3., 0.])
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from batch.timeline import DAY, Timeline, Version
from online.fetch import Fetch
from online.schedule import gamma_prior, silent_rate

#: Default allocation of the rate policies (lookaround, nnl-av): the square-root rule beat
#: the greedy rule on S-timeline (see README, "Closed loop"); ``--policy lookaround-greedy``.
DEFAULT_EXPONENT = 0.5
#: The least rate a page keeps (new links a day), so a page with no evidence is still revisited:
#: the lower clamp of change rates in Kolobov et al. (NeurIPS 2019), 0.0005 a day.
DEFAULT_FLOOR = 0.0005


@dataclass(slots=True)
class Fetched:
    """What one cycle's fetches returned, one entry per fetch in time order.

    ``changed``: the page's state (status, digest, outlinks, text) differs from its previous
    fetch; ``new_links``: outlinks absent from its last successful fetch (0 at a first fetch
    or a failed one); ``events``: the fetched-page events, for policies that run the pipeline.
    """

    pages: np.ndarray
    times: np.ndarray
    ok: np.ndarray
    first: np.ndarray
    changed: np.ndarray
    new_links: np.ndarray
    versions: list[Version | None]
    events: list[Fetch]

    def __len__(self) -> int:
        return len(self.pages)


@dataclass(frozen=True)
class Universe:
    """Every URL a crawl of ``timeline`` can come to know: the timeline's pages and every
    URL of the site any version links to (fetching one that is no page gives a 404). Page
    ``i`` is ``urls[i]``; ``hosts[i]`` the id of its host (a leading ``www.`` ignored).

    ``known_at_start`` is the crawler's index at the start, as a full crawl then would leave
    it: the ``pages_at_start`` pages alive then, and the URLs of the site they link to (those
    that are no page yet are known as 404s)."""

    timeline: Timeline
    urls: list[str]
    index: dict[str, int]
    hosts: np.ndarray
    known_at_start: np.ndarray
    pages_at_start: int

    @property
    def size(self) -> int:
        return len(self.urls)


class Policy(Protocol):
    name: str
    #: most of a cycle's slots that never-fetched pages may take (the rest are recrawls)
    new_page_share: float

    def start(self, universe: Universe) -> None:
        """Set up for a new crawl of ``universe`` (called before the first observation)."""
        ...

    def observe(self, fetched: Fetched) -> None:
        """Learn from a cycle's fetches (the seed crawl first)."""
        ...

    def priority(self, now: float) -> np.ndarray:
        """One value per page of the universe: higher is fetched first, ``-inf`` never.
        Only pages the crawl knows and has fetched before are considered."""
        ...


class _Base:
    """Shared bookkeeping: when each page was last fetched."""

    name = "base"
    new_page_share = 1.0

    def start(self, universe: Universe) -> None:
        self.universe = universe
        self.last = np.full(universe.size, np.nan)

    def observe(self, fetched: Fetched) -> None:
        self.last[fetched.pages] = fetched.times

    def age_days(self, now: float) -> np.ndarray:
        return (now - self.last) / DAY


class UniformPolicy(_Base):
    """Round-robin over known pages: the one fetched longest ago first."""

    name = "uniform"

    def priority(self, now: float) -> np.ndarray:
        return self.age_days(now)


@dataclass
class AdaptivePolicy(_Base):
    """Nutch's AdaptiveFetchSchedule (defaults of ``conf/nutch-default.xml``), fetched in order
    of the next fetch time it sets.

    >>> p = AdaptivePolicy()
    >>> p.next_interval(np.array([30.0, 30.0, 80.0]), np.array([True, False, False])).tolist()
    [24.0, 42.0, 90.0]
    """

    initial_days: float = 30.0
    inc_rate: float = 0.4
    dec_rate: float = 0.2
    min_days: float = 60.0 / DAY
    max_days: float = 90.0

    name = "adaptive"

    def start(self, universe: Universe) -> None:
        super().start(universe)
        self.interval = np.full(universe.size, self.initial_days)
        self.due = np.full(universe.size, np.inf)

    def next_interval(self, interval: np.ndarray, changed: np.ndarray) -> np.ndarray:
        """Days to the next fetch: × (1 − dec_rate) after a change, × (1 + inc_rate) after
        none, within [min_days, max_days]."""
        factor = np.where(changed, 1.0 - self.dec_rate, 1.0 + self.inc_rate)
        return np.clip(interval * factor, self.min_days, self.max_days)

    def observe(self, fetched: Fetched) -> None:
        super().observe(fetched)
        pages, again = fetched.pages, ~fetched.first
        self.interval[pages[again]] = self.next_interval(
            self.interval[pages[again]], fetched.changed[again]
        )
        self.due[pages] = fetched.times + self.interval[pages] * DAY

    def priority(self, now: float) -> np.ndarray:
        return -self.due


def rate_priority(
    rate: np.ndarray,
    age_days: np.ndarray,
    exponent: float,
    floor: float | np.ndarray = DEFAULT_FLOOR,
) -> np.ndarray:
    """``max(rate, floor) ** exponent × age``: the order that realises fetch rates ∝ rate **
    exponent under any budget (see the module docstring)."""
    return np.power(np.maximum(np.nan_to_num(rate), floor), exponent) * age_days


@dataclass
class _RatePolicy(_Base):
    """A per-page rate of new links (or changes) a day, allocated by `rate_priority`.

    The least rate a page keeps is ``floor``, or with ``learned_floor`` the rate of a page as
    silent as it has been (`online.schedule.silent_rate`) under the prior the crawl's own
    fetches show (`online.schedule.gamma_prior`: the pages' new links and days watched): a
    page that has shown nothing is not taken as one that never changes.
    """

    exponent: float = DEFAULT_EXPONENT
    floor: float = DEFAULT_FLOOR
    learned_floor: bool = True

    def start(self, universe: Universe) -> None:
        super().start(universe)
        self.rate = np.zeros(universe.size)
        self.first = np.full(universe.size, np.nan)
        self.counts = np.zeros(universe.size)

    def observe(self, fetched: Fetched) -> None:
        super().observe(fetched)
        first = self.first[fetched.pages]
        self.first[fetched.pages] = np.where(np.isnan(first), fetched.times, first)
        np.add.at(self.counts, fetched.pages, fetched.new_links)

    def rate_floor(self) -> float | np.ndarray:
        """Each page's least rate."""
        if not self.learned_floor:
            return self.floor
        watched = np.nan_to_num((self.last - self.first) / DAY)
        mean, shape = gamma_prior(self.counts, watched)
        return np.maximum(self.floor, silent_rate(mean, shape, watched))

    def priority(self, now: float) -> np.ndarray:
        return rate_priority(self.rate, self.age_days(now), self.exponent, self.rate_floor())


@dataclass
class _PageIntervals:
    """The last ``history`` intervals between a page's successful fetches."""

    history: int
    counts: dict[int, deque] = field(default_factory=dict)

    def add(self, page: int, value: float, days: float) -> deque:
        window = self.counts.setdefault(page, deque(maxlen=self.history))
        window.append((value, days))
        return window


@dataclass
class ChangeRatePolicy(_RatePolicy):
    """Cho & Garcia-Molina's change-rate estimate, allocated by the square-root rule.

    >>> round(ChangeRatePolicy.estimate(changes=2, intervals=10, mean_days=7.0), 4)
    0.0302
    >>> ChangeRatePolicy.estimate(changes=0, intervals=3, mean_days=7.0)
    0.0005
    """

    exponent: float = 0.5
    min_rate: float = 0.0005
    max_rate: float = 7.0
    learned_floor: bool = False  # the estimator's own clamp, as Kolobov et al.

    name = "change-rate"

    def start(self, universe: Universe) -> None:
        super().start(universe)
        self.rate[:] = self.min_rate
        self.intervals = np.zeros(universe.size)
        self.changes = np.zeros(universe.size)
        self.days = np.zeros(universe.size)

    @staticmethod
    def estimate(
        changes: float,
        intervals: float,
        mean_days: float,
        min_rate: float = 0.0005,
        max_rate: float = 7.0,
    ) -> float:
        """λ̂ = −log((n − X + 0.5) / (n + 0.5)) / Ī, clamped (per day)."""
        if intervals <= 0 or mean_days <= 0:
            return min_rate
        rate = -math.log((intervals - changes + 0.5) / (intervals + 0.5)) / mean_days
        return min(max(rate, min_rate), max_rate)

    def observe(self, fetched: Fetched) -> None:
        previous = self.last[fetched.pages]
        super().observe(fetched)
        for k in np.flatnonzero(~fetched.first):
            page = int(fetched.pages[k])
            self.intervals[page] += 1
            self.changes[page] += bool(fetched.changed[k])
            self.days[page] += (fetched.times[k] - previous[k]) / DAY
            self.rate[page] = self.estimate(
                self.changes[page],
                self.intervals[page],
                self.days[page] / self.intervals[page],
                self.min_rate,
                self.max_rate,
            )


@dataclass
class NNLAveragePolicy(_RatePolicy):
    """NNL-Av as a rate: new outlinks over the last ``history`` intervals / their days."""

    history: int = 8

    name = "nnl-av"

    def start(self, universe: Universe) -> None:
        super().start(universe)
        self.window = _PageIntervals(self.history)
        self.last_ok = np.full(universe.size, np.nan)

    def observe(self, fetched: Fetched) -> None:
        for k in range(len(fetched)):
            if not fetched.ok[k]:
                continue
            page = int(fetched.pages[k])
            before = self.last_ok[page]
            self.last_ok[page] = fetched.times[k]
            if np.isnan(before):
                continue
            window = self.window.add(
                page, float(fetched.new_links[k]), (fetched.times[k] - before) / DAY
            )
            days = sum(d for _, d in window)
            self.rate[page] = sum(n for n, _ in window) / days if days > 0 else 0.0
        super().observe(fetched)


class RateSource(Protocol):
    """The pipeline's view of a batch of fetches: each event's published ``rate_per_day``
    (NaN where the pipeline published none: a duplicate or stale event), and the related
    updates the batch published for other pages (`online.related_updates`)."""

    def rates(self, events: Sequence[Fetch]) -> np.ndarray: ...

    def related(self) -> list[tuple[str, float]]:
        """(url, links expected to wait there) of the last batch's related updates."""
        ...


@dataclass
class LookaroundPolicy(_RatePolicy):
    """The default scorer's ``rate_per_day``, read from the pipeline's priority updates, and
    its related updates: a page a related update names has links waiting (its
    ``expected_waiting``) on top of its own rate × age until it is fetched.

    ``source`` makes a fresh pipeline for each crawl (the simulation runs the same pipeline as
    the replay; see `streams.simulate`), so an improved scorer is measured without a change
    here.
    """

    source: Callable[[], RateSource] | None = None
    #: act on the related updates (off: the page's own priority updates only)
    related: bool = True

    name = "lookaround"

    def start(self, universe: Universe) -> None:
        super().start(universe)
        self.pipeline = _pipeline(self.source, self.name)
        self.waiting = np.zeros(universe.size)

    def observe(self, fetched: Fetched) -> None:
        super().observe(fetched)
        _keep_published(self.rate, fetched.pages, self.pipeline.rates(fetched.events))
        self.waiting[fetched.pages] = 0.0
        index = self.universe.index
        for url, links in self.pipeline.related() if self.related else ():
            page = index.get(url)
            if page is not None:
                self.waiting[page] = max(self.waiting[page], links)

    def priority(self, now: float) -> np.ndarray:
        age = self.age_days(now)
        with np.errstate(divide="ignore", invalid="ignore"):
            lump = np.where(self.waiting > 0, self.waiting / np.maximum(age, 1e-9), 0.0)
        return rate_priority(self.rate + lump, age, self.exponent, self.rate_floor())


def _pipeline(source: Callable[[], object] | None, policy: str):  # type: ignore[no-untyped-def]
    """A fresh pipeline for a crawl; ValueError when the policy was made without one."""
    if source is None:
        raise ValueError(f"the {policy} policy needs a rate source (the pipeline)")
    return source()


def _keep_published(target: np.ndarray, pages: np.ndarray, values: np.ndarray) -> None:
    """``target[page] = value`` where the pipeline published a value (not NaN)."""
    published = ~np.isnan(values)
    target[pages[published]] = values[published]


class ScheduleSource(Protocol):
    """The pipeline run with a fetch budget: each event's published ``rate_per_day`` and
    ``next_fetch_at`` (epoch seconds; NaN where none was published)."""

    def schedule(self, events: Sequence[Fetch]) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass
class ScheduledPolicy(_Base):
    """A crawler that fetches each page at the ``next_fetch_at`` lookaround publishes with a
    fetch budget (``fetch_budget_per_day``, `online.schedule`): pages whose time has come, the
    most overdue first; a page not yet due is not fetched, so the slots it leaves show whether
    the schedule spends its budget."""

    source: Callable[[], ScheduleSource] | None = None

    name = "lookaround-scheduled"

    def start(self, universe: Universe) -> None:
        super().start(universe)
        self.pipeline = _pipeline(self.source, self.name)
        self.due = np.full(universe.size, np.inf)

    def observe(self, fetched: Fetched) -> None:
        super().observe(fetched)
        _keep_published(self.due, fetched.pages, self.pipeline.schedule(fetched.events)[1])

    def priority(self, now: float) -> np.ndarray:
        return np.where(self.due <= now, now - self.due, -np.inf)


class OraclePolicy(_Base):
    """Knows the timeline: the pages with the most links waiting first (links in the page's
    current state that its last successful fetch did not show, plus one for a page alive now
    that was not at its last fetch: a page born or back), the longest waiting first among
    equals; a page with nothing waiting is not fetched."""

    name = "oracle"

    def start(self, universe: Universe) -> None:
        super().start(universe)
        self.seen: dict[int, frozenset[str]] = {}
        self.alive = np.zeros(universe.size, dtype=bool)
        self.waiting = np.zeros(universe.size)
        self.since = np.full(universe.size, np.inf)
        self._changes = list(universe.timeline.changes())
        self._next = 0

    def observe(self, fetched: Fetched) -> None:
        super().observe(fetched)
        for page, version in zip(fetched.pages.tolist(), fetched.versions, strict=True):
            alive = version is not None and version.ok
            if alive:
                self.seen[page] = version.links  # type: ignore[union-attr]
            self.alive[page] = alive
            self.waiting[page] = 0.0
            self.since[page] = np.inf

    def priority(self, now: float) -> np.ndarray:
        changes, index = self._changes, self.universe.index
        while self._next < len(changes) and changes[self._next].at <= now:
            version = changes[self._next]
            self._next += 1
            page = index[version.url]
            if np.isnan(self.last[page]):
                continue  # never fetched: a new page, fetched first anyway
            waiting = len(version.links - self.seen.get(page, frozenset()))
            waiting += version.ok and not self.alive[page]
            if waiting and not self.waiting[page]:
                self.since[page] = version.at
            self.waiting[page] = waiting
            if not waiting:
                self.since[page] = np.inf
        span = self.universe.timeline.end - self.universe.timeline.start
        age = np.where(np.isfinite(self.since), (now - self.since) / (span + 1.0), 0.0)
        return np.where(self.waiting > 0, self.waiting + age, -np.inf)


POLICY_NAMES = ("lookaround", "adaptive", "uniform", "change-rate", "nnl-av", "oracle")
#: Variants reachable by name (not run by default).
VARIANTS = {
    "lookaround-scheduled": ("lookaround-scheduled", {}),
    "lookaround-greedy": ("lookaround", {"exponent": 1.0}),
    "lookaround-fixed-floor": ("lookaround", {"learned_floor": False}),
    "lookaround-own-updates": ("lookaround", {"related": False}),
    "nnl-av-fixed-floor": ("nnl-av", {"learned_floor": False}),
    "lookaround-sqrt": ("lookaround", {"exponent": 0.5}),
    "nnl-av-greedy": ("nnl-av", {"exponent": 1.0}),
}


def check_policy(name: str) -> None:
    """ValueError naming the known policies unless ``name`` is one."""
    if name not in VARIANTS and name not in POLICY_NAMES:
        known = [*POLICY_NAMES, *VARIANTS]
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(known)}")


def make_policy(
    name: str,
    *,
    rates: Callable[[], RateSource] | None = None,
    scheduled: Callable[[], ScheduleSource] | None = None,
) -> Policy:
    """The policy called ``name`` (see `POLICY_NAMES` and `VARIANTS`); ``rates`` makes the
    pipeline for ``lookaround``, ``scheduled`` the pipeline with the crawl's budget for
    ``lookaround-scheduled``. ValueError names the known policies."""
    check_policy(name)
    base, options = VARIANTS.get(name, (name, {}))
    policy: Policy
    if base == "uniform":
        policy = UniformPolicy()
    elif base == "adaptive":
        policy = AdaptivePolicy()
    elif base == "change-rate":
        policy = ChangeRatePolicy()
    elif base == "nnl-av":
        policy = NNLAveragePolicy(**options)
    elif base == "lookaround":
        policy = LookaroundPolicy(source=rates, **options)
    elif base == "lookaround-scheduled":
        policy = ScheduledPolicy(source=scheduled)
    else:
        policy = OraclePolicy()
    policy.name = name
    return policy
