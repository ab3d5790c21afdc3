"""Scorers: turn a page's features into a recrawl priority. Chosen by name.

Baselines from the paper: ``nnl-pr`` (new outlinks in the last interval), ``nnl-av`` (mean
over the window) and ``ccr`` (content change rate). The default ``lbla`` scorer is a transparent
formula over the page's own history (look back) and its related pages (look around):

* own rate of new links per day, recent intervals weighted more (half-life in intervals);
* shrunk towards the related pages' rate with the weight of ``prior_days`` of observation, so a
  page with no history takes its prior from its related pages and a page with a long history
  mostly speaks for itself;
* expected new links = rate x the page's usual interval; the score is their total;
* P(>= 1 new link) from the page's own link change rate, shrunk towards the related pages'.

>>> scorer = get_scorer("lbla")
>>> busy = {"dp_new_internal_1": 5.0, "dp_interval_days_1": 7.0, "dp_new_external_1": 0.0}
>>> quiet = {"dp_new_internal_1": 0.0, "dp_interval_days_1": 7.0, "dp_new_external_1": 0.0}
>>> scorer.score_one(busy).score > scorer.score_one(quiet).score
True
>>> newcomer = {"dn_related_rate_internal_per_day": 1.0, "dn_related_lcr_internal": 0.5}
>>> round(scorer.score_one(newcomer).expected_new_internal, 3)
7.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

Features = dict[str, float]


@dataclass(frozen=True, slots=True)
class Score:
    """One page's priority and the estimates behind it."""

    score: float
    expected_new_internal: float | None
    expected_new_external: float | None
    p_new: float


class Scorer(Protocol):
    name: str
    version: str

    def score_one(self, features: Features) -> Score: ...

    def score_many(self, rows: Sequence[Features]) -> list[Score]: ...


class _RowScorer:
    """Scores rows one by one; learned scorers override `score_many` to batch."""

    name = "base"
    version = "1"

    def score_one(self, features: Features) -> Score:
        raise NotImplementedError

    def score_many(self, rows: Sequence[Features]) -> list[Score]:
        return [self.score_one(row) for row in rows]


def _poisson_p(expected: float) -> float:
    return 1.0 - math.exp(-max(expected, 0.0))


class NNLPreviousScorer(_RowScorer):
    """Baseline NNL-Pr: the new outlinks of the last interval predict the next.

    >>> NNLPreviousScorer().score_one({"dp_new_internal_1": 3.0, "dp_new_external_1": 1.0}).score
    4.0
    """

    name = "nnl-pr"

    def score_one(self, features: Features) -> Score:
        internal = features.get("dp_new_internal_1", 0.0)
        external = features.get("dp_new_external_1", 0.0)
        return Score(internal + external, internal, external, _poisson_p(internal + external))


class NNLAverageScorer(_RowScorer):
    """Baseline NNL-Av: the mean new outlinks per interval over the history window.

    >>> NNLAverageScorer().score_one({"dp_new_internal_mean": 2.5}).expected_new_internal
    2.5
    """

    name = "nnl-av"

    def score_one(self, features: Features) -> Score:
        internal = features.get("dp_new_internal_mean", 0.0)
        external = features.get("dp_new_external_mean", 0.0)
        return Score(internal + external, internal, external, _poisson_p(internal + external))


class CCRScorer(_RowScorer):
    """Baseline CCR: the content change rate (close to random for link change, per the paper).

    It estimates no counts, so its expected values are None.

    >>> CCRScorer().score_one({"dp_ccr": 0.25}).score
    0.25
    """

    name = "ccr"

    def score_one(self, features: Features) -> Score:
        ccr = features.get("dp_ccr", 0.0)
        return Score(ccr, None, None, ccr)


@dataclass
class LBLAScorer(_RowScorer):
    """Look back, look around: own recent rate shrunk towards related pages' rate."""

    half_life: float = 2.0
    prior_days: float = 7.0
    prior_intervals: float = 1.0
    default_interval_days: float = 7.0
    fallback_rate_internal: float = 0.0
    fallback_rate_external: float = 0.0

    name = "lbla"
    version = "1"

    def score_one(self, features: Features) -> Score:
        horizon = features.get("dp_interval_days_mean", self.default_interval_days)
        internal, p_internal = self._side(features, "internal", horizon)
        external, p_external = self._side(features, "external", horizon)
        p_new = 1.0 - (1.0 - p_internal) * (1.0 - p_external)
        return Score(internal + external, internal, external, p_new)

    def _side(self, features: Features, side: str, horizon: float) -> tuple[float, float]:
        fallback = self.fallback_rate_internal if side == "internal" else self.fallback_rate_external
        prior_rate = features.get(f"dn_related_rate_{side}_per_day", fallback)
        prior_p = features.get(f"dn_related_lcr_{side}", _poisson_p(prior_rate * horizon))
        links = days = changed = weights = 0.0
        lag = 1
        while (count := features.get(f"dp_new_{side}_{lag}")) is not None:
            w = 0.5 ** ((lag - 1) / self.half_life)
            links += w * count
            days += w * features.get(f"dp_interval_days_{lag}", self.default_interval_days)
            changed += w * (count > 0)
            weights += w
            lag += 1
        rate = (links + self.prior_days * prior_rate) / (days + self.prior_days)
        p = (changed + self.prior_intervals * prior_p) / (weights + self.prior_intervals)
        return rate * horizon, p


SCORERS: dict[str, Callable[[], Scorer]] = {
    "lbla": LBLAScorer,
    "nnl-pr": NNLPreviousScorer,
    "nnl-av": NNLAverageScorer,
    "ccr": CCRScorer,
}
DEFAULT_SCORER = "lbla"


def get_scorer(name: str) -> Scorer:
    """The scorer registered under ``name``; ValueError lists the known names."""
    try:
        return SCORERS[name]()
    except KeyError:
        raise ValueError(f"unknown scorer {name!r}; choose one of {sorted(SCORERS)}") from None
