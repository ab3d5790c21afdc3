"""Scorers: turn a page's features into a recrawl priority. Chosen by name.

Baselines from the paper: ``nnl-pr`` (new outlinks in the last interval), ``nnl-av`` (mean
over the window) and ``ccr`` (content change rate). The default ``lbla`` scorer is a transparent
formula over the page's own history (look back) and its related pages (look around).
Every scorer, these and the learned ones, is chosen by name in `online.scorers`.

LBLA:

* own rate of new links per day, recent intervals weighted more (half-life in intervals);
* shrunk towards the related pages' rate with the weight of ``prior_days`` of observation, so a
  page with no history takes its prior from its related pages and a page with a long history
  mostly speaks for itself;
* expected new links = rate x the page's usual interval; the score is their total;
* P(>= 1 new link) from the page's own link change rate, shrunk towards the related pages'.

>>> scorer = LBLAScorer()
>>> busy = {"dp_new_internal_1": 5.0, "dp_interval_days_1": 7.0, "dp_new_external_1": 0.0}
>>> quiet = {"dp_new_internal_1": 0.0, "dp_interval_days_1": 7.0, "dp_new_external_1": 0.0}
>>> scorer.score_one(busy).score > scorer.score_one(quiet).score
True
>>> newcomer = {"dn_related_rate_internal_per_day": 1.0, "dn_related_lcr_internal": 0.5}
>>> round(scorer.score_one(newcomer).expected_new_internal, 3)
7.0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from online.features import window, window_columns

if TYPE_CHECKING:
    from online.learners import Label

Features = dict[str, float]


@dataclass(frozen=True, slots=True)
class Score:
    """One page's priority and the estimates behind it."""

    score: float
    expected_new_internal: float | None
    expected_new_external: float | None
    p_new: float


@dataclass(frozen=True, slots=True)
class Scores:
    """A batch's priorities: one array entry per row (expected counts None if not estimated)."""

    score: np.ndarray
    expected_new_internal: np.ndarray | None
    expected_new_external: np.ndarray | None
    p_new: np.ndarray
    rate_per_day: np.ndarray | None = None
    reasons: list[list[str]] | None = None
    models: dict[str, str] | None = None
    #: the candidates' rates per day behind a learned score (both sides), by name
    candidates: dict[str, np.ndarray] | None = None
    #: per row, the model versions behind its score, where they differ within the batch (a
    #: learned scorer's state changes at its epochs); ``models`` otherwise
    row_models: list[dict[str, str]] | None = None

    def row(self, i: int) -> Score:
        def opt(a: np.ndarray | None) -> float | None:
            return None if a is None else float(a[i])

        return Score(
            float(self.score[i]),
            opt(self.expected_new_internal),
            opt(self.expected_new_external),
            float(self.p_new[i]),
        )


class Scorer(Protocol):
    name: str
    version: str

    def score_matrix(self, X: np.ndarray, columns: Mapping[str, int]) -> Scores: ...

    def score_one(self, features: Features) -> Score: ...

    def score_many(self, rows: Sequence[Features]) -> list[Score]: ...


@runtime_checkable
class LearningScorer(Scorer, Protocol):
    """A scorer that learns from the stream (`online.learned`). The pipeline hands it, with
    each row, the label that row's event brings for its page's previous row; the scorer's state
    is written with the batch's page records, and restored (or rolled back) from it."""

    learns: bool

    def score_and_learn(
        self,
        X: np.ndarray,
        columns: Mapping[str, int],
        previous: Sequence[np.ndarray | None],
        labels: Sequence[Label | None],
        times: Sequence[float] | None = None,
    ) -> Scores: ...

    def state(self) -> object: ...

    def restore(self, state: object) -> None: ...


class _MatrixScorer:
    """Scores a feature matrix at once; dict inputs are turned into a matrix first."""

    name = "base"
    version = "1"

    def score_matrix(self, X: np.ndarray, columns: Mapping[str, int]) -> Scores:
        raise NotImplementedError

    def score_many(self, rows: Sequence[Features]) -> list[Score]:
        names = sorted({name for row in rows for name in row})
        columns = {name: j for j, name in enumerate(names)}
        X = np.full((len(rows), len(names)), np.nan)
        for i, row in enumerate(rows):
            for name, value in row.items():
                X[i, columns[name]] = value
        scores = self.score_matrix(X, columns)
        return [scores.row(i) for i in range(len(rows))]

    def score_one(self, features: Features) -> Score:
        return self.score_many([features])[0]


def _col(X: np.ndarray, columns: Mapping[str, int], name: str, default: float) -> np.ndarray:
    """Column ``name`` with NaN (unknown) replaced by ``default``; all default if absent."""
    j = columns.get(name)
    if j is None:
        return np.full(len(X), default, dtype=np.float64)
    return np.where(np.isnan(X[:, j]), default, X[:, j])


def _poisson_p(expected: np.ndarray) -> np.ndarray:
    return 1.0 - np.exp(-np.maximum(expected, 0.0))


class _CountBaseline(_MatrixScorer):
    """A baseline that reads its internal and external estimates from two feature columns."""

    internal_column = ""
    external_column = ""

    def score_matrix(self, X: np.ndarray, columns: Mapping[str, int]) -> Scores:
        internal = _col(X, columns, self.internal_column, 0.0)
        external = _col(X, columns, self.external_column, 0.0)
        total = internal + external
        return Scores(total, internal, external, _poisson_p(total))


class NNLPreviousScorer(_CountBaseline):
    """Baseline NNL-Pr: the new outlinks of the last interval predict the next.

    >>> NNLPreviousScorer().score_one({"dp_new_internal_1": 3.0, "dp_new_external_1": 1.0}).score
    4.0
    """

    name = "nnl-pr"
    internal_column = "dp_new_internal_1"
    external_column = "dp_new_external_1"


class NNLAverageScorer(_CountBaseline):
    """Baseline NNL-Av: the mean new outlinks per interval over the history window.

    Computed from the window's counts where the row has them (exact: equal means tie, as the
    baseline's own ties matter to a rank correlation), else from the stored means.

    >>> NNLAverageScorer().score_one({"dp_new_internal_mean": 2.5}).expected_new_internal
    2.5
    >>> row = {"dp_new_internal_1": 1.0, "dp_new_internal_2": 2.0, "dp_new_external_1": 0.0,
    ...        "dp_new_external_2": 0.0, "dp_content_changed_1": 0.0,
    ...        "dp_content_changed_2": 0.0, "dp_interval_days_1": 7.0, "dp_interval_days_2": 7.0}
    >>> NNLAverageScorer().score_one(row).expected_new_internal
    1.5
    """

    name = "nnl-av"
    internal_column = "dp_new_internal_mean"
    external_column = "dp_new_external_mean"

    def score_matrix(self, X: np.ndarray, columns: Mapping[str, int]) -> Scores:
        at = window_columns(columns)
        if not at.size or at[3, 0] < 0:  # no window of intervals: the stored means
            return super().score_matrix(X, columns)
        w = window(np.asarray(X, dtype=np.float64), at)
        n = w.present.sum(axis=1)[:, None]
        links = w.counts.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(n > 0, links / n, 0.0)
            total = np.where(n[:, 0] > 0, links.sum(axis=1) / n[:, 0], 0.0)
        return Scores(total, mean[:, 0], mean[:, 1], _poisson_p(total))


class CCRScorer(_MatrixScorer):
    """Baseline CCR: the content change rate (close to random for link change, per the paper).

    It estimates no counts, so its expected values are None.

    >>> CCRScorer().score_one({"dp_ccr": 0.25}).score
    0.25
    """

    name = "ccr"

    def score_matrix(self, X: np.ndarray, columns: Mapping[str, int]) -> Scores:
        ccr = _col(X, columns, "dp_ccr", 0.0)
        return Scores(ccr, None, None, ccr.copy())


@dataclass
class LBLAScorer(_MatrixScorer):
    """Look back, look around: own recent rate shrunk towards related pages' rate."""

    half_life: float = 2.0
    prior_days: float = 7.0
    prior_intervals: float = 1.0
    default_interval_days: float = 7.0
    fallback_rate_internal: float = 0.0
    fallback_rate_external: float = 0.0

    name = "lbla"
    version = "1"

    def score_matrix(self, X: np.ndarray, columns: Mapping[str, int]) -> Scores:
        c = self.components(X, columns)
        p_new = 1.0 - (1.0 - c["p_internal"]) * (1.0 - c["p_external"])
        total = c["internal"] + c["external"]
        return Scores(total, c["internal"], c["external"], p_new)

    def components(
        self, X: np.ndarray, columns: Mapping[str, int], horizon_days: float | None = None
    ) -> dict[str, np.ndarray]:
        """Per side: expected count over the horizon (default: the page's usual interval) and
        P(>= 1); ``own_share``: the weight of the page's own history against its related
        pages' prior (0 for a newcomer, towards 1 for a long history)."""
        if horizon_days is None:
            horizon = _col(X, columns, "dp_interval_days_mean", self.default_interval_days)
        else:
            horizon = np.full(len(X), horizon_days)
        out: dict[str, np.ndarray] = {}
        days = np.zeros(len(X))
        for side in ("internal", "external"):
            out[side], out[f"p_{side}"], side_days = self._side(X, columns, side, horizon)
            days = np.maximum(days, side_days)
        out["own_share"] = days / (days + self.prior_days)
        return out

    def _side(
        self, X: np.ndarray, columns: Mapping[str, int], side: str, horizon: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        fallback = (
            self.fallback_rate_internal if side == "internal" else self.fallback_rate_external
        )
        prior_rate = _col(X, columns, f"dn_related_rate_{side}_per_day", fallback)
        prior_p = _col(X, columns, f"dn_related_lcr_{side}", np.nan)
        prior_p = np.where(np.isnan(prior_p), _poisson_p(prior_rate * horizon), prior_p)
        links = np.zeros(len(X))
        days = np.zeros(len(X))
        changed = np.zeros(len(X))
        weights = np.zeros(len(X))
        lag = 1
        while (j := columns.get(f"dp_new_{side}_{lag}")) is not None:
            count = X[:, j]
            present = ~np.isnan(count)
            w = np.where(present, 0.5 ** ((lag - 1) / self.half_life), 0.0)
            links += w * np.where(present, count, 0.0)
            days += w * _col(X, columns, f"dp_interval_days_{lag}", self.default_interval_days)
            changed += w * (np.where(present, count, 0.0) > 0)
            weights += w
            lag += 1
        rate = (links + self.prior_days * prior_rate) / (days + self.prior_days)
        p = (changed + self.prior_intervals * prior_p) / (weights + self.prior_intervals)
        return rate * horizon, p, days


#: The scorer a run uses unless told otherwise (`online.scorers` has every name). Best by
#: yield@10% on held-out crawls (bench/scorer_choice.py); without a registered model it is the
#: online learner and LBLA. Here rather than in the registry, so that the settings can read it
#: without loading the learners.
DEFAULT_SCORER = "ensemble"
