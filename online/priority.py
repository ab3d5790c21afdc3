"""The priority: estimates from several models combined into what the crawler acts on.

Each model gives an `Estimate` per page: expected new internal / external outlinks over the
deployment's horizon (``horizon_days``), P(>= 1 new link) per side, and optionally a predictive
standard deviation. `combine` averages them with per-row weights and derives

* ``rate_per_day``: expected new outlinks per day since the fetch (count / horizon), so the
  expected count at any later time t is rate x (t - fetched_at) and pages fetched at different
  times compare fairly;
* ``score``: expected new outlinks over the horizon plus an exploration bonus for pages with
  short histories, ``exploration x std x (1 - intervals / history)``: an upper confidence bound
  that fades as the page's own history fills up;
* ``reasons``: what drove the score (``model``, ``own_history``, ``related_pages``,
  ``exploration``), strongest first; ``prior`` alone when nothing is known of the page yet
  (a first fetch without related pages).

`next_fetch_days` turns a rate into the suggested wait before the next fetch.

>>> e = Estimate(np.array([2.0]), np.array([0.0]), np.array([0.8]), np.array([0.1]))
>>> s = combine([("lbla", e, np.ones(1))], intervals=np.array([8.0]), history=8)
>>> float(s.score[0]), round(float(s.p_new[0]), 2), float(s.rate_per_day[0]) * 7
(2.0, 0.82, 2.0)
>>> next_fetch_days(np.array([0.5, 0.0, 100.0])).tolist()
[2.0, 30.0, 0.25]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from online.scoring import Scores

DEFAULT_HORIZON_DAYS = 7.0
DEFAULT_EXPLORATION = 0.25


@dataclass(frozen=True)
class Estimate:
    """One model's view of a batch: counts over the horizon and P(>= 1) per side."""

    internal: np.ndarray
    external: np.ndarray
    p_internal: np.ndarray
    p_external: np.ndarray
    std_total: np.ndarray | None = None

    @property
    def total(self) -> np.ndarray:
        return self.internal + self.external


def combine(
    parts: Sequence[tuple[str, Estimate, np.ndarray]],
    *,
    intervals: np.ndarray,
    history: int,
    own_share: np.ndarray | None = None,
    related_known: np.ndarray | None = None,
    horizon_days: float = DEFAULT_HORIZON_DAYS,
    exploration: float = 0.0,
    models: dict[str, str] | None = None,
) -> Scores:
    """Weighted mean of the parts' estimates (weights per row, normalised), plus exploration.

    ``own_share`` is how much of the transparent estimate comes from the page's own history
    (the rest from its related pages); with ``related_known`` it orders the reason codes.
    """
    n = len(intervals)
    weights = np.stack([np.asarray(w, np.float64) for _, _, w in parts])
    weights = weights / np.maximum(weights.sum(axis=0), 1e-12)

    def mix(field: str) -> np.ndarray:
        return sum(w * getattr(e, field) for (_, e, _), w in zip(parts, weights, strict=True))

    internal, external = mix("internal"), mix("external")
    p_internal = np.clip(mix("p_internal"), 0.0, 1.0)
    p_external = np.clip(mix("p_external"), 0.0, 1.0)
    expected = internal + external
    std = np.zeros(n)
    for (_, e, _), w in zip(parts, weights, strict=True):
        part_std = np.sqrt(np.maximum(e.total, 0.0)) if e.std_total is None else e.std_total
        std += w * part_std
    shortness = 1.0 - np.minimum(np.nan_to_num(intervals), history) / max(history, 1)
    bonus = exploration * std * shortness
    score = expected + bonus
    reasons = _reasons(parts, weights, own_share, related_known, bonus, score)
    return Scores(
        score=score,
        expected_new_internal=internal,
        expected_new_external=external,
        p_new=1.0 - (1.0 - p_internal) * (1.0 - p_external),
        rate_per_day=expected / horizon_days,
        reasons=reasons,
        models=dict(models or {}),
    )


def _reasons(
    parts: Sequence[tuple[str, Estimate, np.ndarray]],
    weights: np.ndarray,
    own_share: np.ndarray | None,
    related_known: np.ndarray | None,
    bonus: np.ndarray,
    score: np.ndarray,
) -> list[list[str]]:
    n = len(score)
    learned = np.zeros(n)
    for (name, _, _), w in zip(parts, weights, strict=True):
        if name != "lbla":
            learned += w
    transparent = 1.0 - learned
    own = transparent * (np.ones(n) if own_share is None else own_share)
    related = transparent - own
    if related_known is not None:
        related = np.where(related_known, related, 0.0)
    strength = {
        "model": learned,
        "own_history": own,
        "related_pages": related,
        "exploration": np.where(score > 0, bonus / np.maximum(score, 1e-12), 0.0),
    }
    names = list(strength)
    table = np.stack([strength[k] for k in names], axis=1)
    order = np.argsort(-table, axis=1, kind="stable")
    # Each row's reasons are its columns in ``order`` that reach 5%: rows with the same
    # pattern share one list (a handful of patterns per batch, built once each).
    kept = np.take_along_axis(table >= 0.05, order, axis=1)
    codes = ((order + 1) * kept) @ (len(names) + 1) ** np.arange(len(names))[::-1]
    patterns, inverse = np.unique(codes, return_inverse=True)
    lists = []
    for code in patterns.tolist():
        digits = [code // (len(names) + 1) ** p % (len(names) + 1) for p in range(len(names))]
        lists.append([names[d - 1] for d in reversed(digits) if d] or ["prior"])
    return [lists[i] for i in inverse.reshape(-1).tolist()]


def next_fetch_days(
    rate_per_day: np.ndarray,
    *,
    target_new_links: float = 1.0,
    min_days: float = 0.25,
    max_days: float = 30.0,
) -> np.ndarray:
    """Days until the expected new outlinks reach ``target_new_links``, within bounds."""
    rate = np.asarray(rate_per_day, np.float64)
    with np.errstate(divide="ignore"):
        days = np.where(rate > 0, target_new_links / np.maximum(rate, 1e-300), np.inf)
    return np.clip(days, min_days, max_days)
