"""A budget-aware schedule: ``next_fetch_at`` from the square-root allocation that
`lookaround simulate` found best, so a crawler that fetches each page at its ``next_fetch_at``
spends about its budget.

With a budget of R fetches a day over N pages whose expected new links a day are λ_i, the
square-root rule fetches page i at the rate r_i = R √λ_i / Σ_j √λ_j, i.e. every

    1 / r_i = N · m / (R · √λ_i) days,    m = the mean of √λ over the pages.

The allocation's state (`Allocation`) is learned from the stream in O(1) memory:

* λ is at least the rate of a page as silent as this one under the prior the stream shows
  (`gamma_prior`, `silent_rate`: a Gamma prior over the pages' rates, its mean and shape by
  the method of moments from every page's new links and days over its history window): a
  page that has shown nothing is not taken as one that never changes, and the more alike
  the pages, the longer an unseen one keeps the site's mean rate; and at least ``floor``
  (0.0005 a day, the clamp of Kolobov et al., NeurIPS 2019);
* N counts the pages' first fetches;
* m is a time-weighted mean: a fetch adds its page's √λ with the weight of the days since the
  page's previous fetch, in an exponential window (``half_life_days``). A page fetched every
  I days then counts I × (H / I) = H whatever I is: every page weighs by the time it covers,
  not by how often it is fetched. Before any page has a second fetch, m is the page's own √λ
  (every page gets the uniform share N / R).

`allocate` is a pure state transition, ``(state | None, batch) -> (state, waits)``, that takes
the batch's fetches one at a time in stream order: how a stream is cut into batches changes
nothing.

>>> budget = BudgetSchedule(per_day=4.0)
>>> state, waits = allocate(None, budget, rates=np.array([0.1, 0.4]),
...                         since_days=[None, None], timestamps=np.array([0.0, 0.0]))
>>> state.pages, waits.tolist()  # first fetches: the pages seen so far share the budget evenly
(2, [0.25, 0.5])
>>> for day in range(1, 31):
...     state, waits = allocate(state, budget, rates=np.array([0.1, 0.4]),
...                             since_days=[1.0, 1.0], timestamps=np.array([day, day]) * 86400.0)
>>> round(float(waits[0] / waits[1]), 1), round(float((1 / waits).sum()), 1)  # r ∝ √λ, Σ r ≈ R
(2.0, 4.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from online.history import PageState

DAY = 86_400.0
#: The least rate a page keeps (new links a day), so every page is revisited (Kolobov et al.).
DEFAULT_FLOOR = 0.0005


@dataclass(frozen=True)
class BudgetSchedule:
    """The allocation's settings: the budget (fetches a day), the rate floor, the window of
    the mean and the bounds of a wait (days)."""

    per_day: float
    floor: float = DEFAULT_FLOOR
    half_life_days: float = 30.0
    min_days: float = 0.25
    max_days: float = 365.0

    def __post_init__(self) -> None:
        if not self.per_day > 0:
            raise ValueError("fetch_budget_per_day must be positive")


class Evidence(NamedTuple):
    """A page's new links and days over its history window before a fetch and after it."""

    links_before: float
    days_before: float
    links_after: float
    days_after: float

    @classmethod
    def of(cls, before: PageState | None, after: PageState) -> Evidence:
        def totals(state: PageState | None) -> tuple[float, float]:
            if state is None:
                return 0.0, 0.0
            return (
                float(sum(iv.new_internal + iv.new_external for iv in state.window)),
                float(sum(iv.days for iv in state.window)),
            )

        return cls(*totals(before), *totals(after))


class Allocation(NamedTuple):
    """What the allocation learned from the stream: pages seen, the decayed sums of weighted
    √rate and of weights, the time (epoch seconds) they are decayed to, and the sums over
    pages of their windows' new links k and days T (k, T, k², kT, T²: the prior of
    `gamma_prior`, kept up to date as each fetch moves its page's window)."""

    pages: int = 0
    weighted_root: float = 0.0
    weight: float = 0.0
    at: float = -math.inf
    links: float = 0.0
    days: float = 0.0
    links_sq: float = 0.0
    links_days: float = 0.0
    days_sq: float = 0.0

    def to_bytes(self) -> bytes:
        return np.array(self, dtype="<f8").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> Allocation:
        """A stored state; one written before the prior was kept (4 values) starts it empty."""
        values = np.frombuffer(data, dtype="<f8", count=len(data) // 8).tolist()
        pages, *rest = values
        return cls(int(pages), *rest)

    def moved(self, evidence: Evidence) -> Allocation:
        """The state after a page's window moved from ``evidence``'s before to its after."""
        k0, t0, k1, t1 = evidence
        return self._replace(
            links=self.links + k1 - k0,
            days=self.days + t1 - t0,
            links_sq=self.links_sq + k1 * k1 - k0 * k0,
            links_days=self.links_days + k1 * t1 - k0 * t0,
            days_sq=self.days_sq + t1 * t1 - t0 * t0,
        )

    def prior(self) -> tuple[float, float]:
        """`gamma_prior`'s (mean, shape) from the sums."""
        return prior_of_sums(self.links, self.days, self.links_sq, self.links_days, self.days_sq)


def gamma_prior(counts: np.ndarray, exposures: np.ndarray) -> tuple[float, float]:
    """The mean and shape of a Gamma prior over pages' rates of new links, by the method of
    moments from each page's count and exposure (days watched): with rates Gamma(shape,
    shape / mean), a count over T days has mean mean × T and variance mean × T + mean² T² /
    shape, so the counts' spread beyond Poisson's sets the shape. A small shape: a few pages
    gain nearly every link; no spread beyond Poisson: ``inf`` (every page alike).

    >>> mean, shape = gamma_prior(np.array([0, 0, 0, 9]), np.array([10.0, 10.0, 10.0, 10.0]))
    >>> round(mean, 3), round(shape, 3)
    (0.225, 0.391)
    >>> gamma_prior(np.array([2, 2, 2]), np.array([10.0, 10.0, 10.0]))
    (0.2, inf)
    """
    k = np.asarray(counts, np.float64)
    t = np.asarray(exposures, np.float64)
    return prior_of_sums(float(k.sum()), float(t.sum()), float(k @ k), float(k @ t), float(t @ t))


def prior_of_sums(
    links: float, days: float, links_sq: float, links_days: float, days_sq: float
) -> tuple[float, float]:
    """`gamma_prior` from the pages' sums of k, T, k², kT and T² (a page watched 0 days adds
    nothing to any of them): Σ(k − mean·T)² = Σk² − 2·mean·ΣkT + mean²·ΣT²."""
    if days <= 0:
        return 0.0, math.inf
    mean = links / days
    excess = links_sq - 2 * mean * links_days + mean * mean * days_sq - mean * days
    if mean <= 0 or excess <= 0:
        return mean, math.inf
    return mean, mean * mean * days_sq / excess


def silent_rate(mean: float, shape: float, observed_days: np.ndarray | float) -> np.ndarray:
    """The rate of a page that has shown no new links in ``observed_days``: the posterior
    mean of its Poisson rate under the Gamma prior (`gamma_prior`), ``mean / (1 + mean ×
    observed_days / shape)``. An unwatched page is an average page; the longer it stays
    silent, the less it is taken to gain, the sooner the more the pages differ (small shape).

    >>> silent_rate(0.1, 1.0, np.array([0.0, 10.0, 90.0])).tolist()
    [0.1, 0.05, 0.01]
    """
    return mean / (1.0 + mean * np.asarray(observed_days, np.float64) / shape)


def allocate(
    state: Allocation | None,
    schedule: BudgetSchedule,
    *,
    rates: np.ndarray,
    since_days: Sequence[float | None],
    timestamps: np.ndarray,
    evidence: Sequence[Evidence] | None = None,
) -> tuple[Allocation, np.ndarray]:
    """Waits (days) before each fetch's next one, in stream order, and the state after.

    ``since_days[i]``: days since the page's previous fetch, None for its first fetch;
    ``evidence[i]``: its page's window before and after it (the prior of the rate floor;
    without it, the floor is ``schedule.floor``).
    """
    state = state or Allocation()
    values = np.nan_to_num(np.asarray(rates, np.float64)).tolist()
    decay = math.log(2.0) / (schedule.half_life_days * DAY)
    waits = np.empty(len(values))
    moves = evidence if evidence is not None else [None] * len(values)
    for k, (value, since, t, move) in enumerate(
        zip(values, since_days, np.asarray(timestamps, np.float64).tolist(), moves, strict=True)
    ):
        floor = schedule.floor
        if move is not None:
            state = state.moved(move)
            floor = max(floor, float(silent_rate(*state.prior(), move.days_after)))
        root = math.sqrt(max(value, floor))
        pages, weighted, weight, at = state[:4]
        if since is None:
            pages += 1
        else:
            if t > at:
                if weight > 0:
                    shrink = math.exp(-decay * (t - at))
                    weighted, weight = weighted * shrink, weight * shrink
                at = t
            w = since * math.exp(-decay * (at - t))
            weighted, weight = weighted + w * root, weight + w
        state = state._replace(pages=pages, weighted_root=weighted, weight=weight, at=at)
        mean = weighted / weight if weight > 0 else root
        waits[k] = max(pages, 1) * mean / (schedule.per_day * root)
    waits = np.clip(waits, schedule.min_days, schedule.max_days)
    return state, waits
