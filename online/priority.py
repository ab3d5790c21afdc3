"""The priority's parts a crawler acts on, beyond the score: reasons and the next fetch.

* ``reasons``: what drove a score (``model``, ``own_history``, ``related_pages``,
  ``content_changes``, ``exploration``, ``prior``: the site's overall rate), strongest first;
* `next_fetch_days` turns a rate per day into the suggested wait before the next fetch: when
  the expected new outlinks reach a target, within bounds.

>>> next_fetch_days(np.array([0.5, 0.0, 100.0])).tolist()
[2.0, 30.0, 0.25]
"""

from __future__ import annotations

import numpy as np

DEFAULT_HORIZON_DAYS = 7.0
DEFAULT_EXPLORATION = 0.25


#: Reason codes, in the order ties are listed.
REASONS = ("model", "own_history", "related_pages", "content_changes", "exploration", "prior")
#: A source must carry this share of the score to be named.
_REASON_SHARE = 0.05


def reasons_of(
    shares: dict[str, np.ndarray], bonus: np.ndarray, score: np.ndarray
) -> list[list[str]]:
    """Per row, what drove the score, strongest first: each source's share of the estimate
    (``shares``: model, own_history, related_pages, content_changes, prior; summing to 1 per
    row) scaled to the estimate's part of the score, and the exploration bonus's part.

    >>> reasons_of({"own_history": np.array([0.9, 0.0]), "prior": np.array([0.1, 1.0])},
    ...            bonus=np.array([0.0, 0.0]), score=np.array([2.0, 0.1]))
    [['own_history', 'prior'], ['prior']]
    """
    n = len(score)
    with np.errstate(divide="ignore", invalid="ignore"):
        explored = np.where(score > 0, bonus / np.maximum(score, 1e-300), 0.0)
    strength = {name: shares.get(name, np.zeros(n)) * (1.0 - explored) for name in REASONS}
    strength["exploration"] = explored
    table = np.stack([strength[name] for name in REASONS], axis=1)
    order = np.argsort(-table, axis=1, kind="stable")
    # Each row's reasons are its columns in ``order`` that reach the share: rows with the same
    # pattern share one list (a handful of patterns per batch, built once each).
    kept = np.take_along_axis(table >= _REASON_SHARE, order, axis=1)
    base = len(REASONS) + 1
    codes = ((order + 1) * kept) @ base ** np.arange(len(REASONS))[::-1]
    patterns, inverse = np.unique(codes, return_inverse=True)
    lists = []
    for code in patterns.tolist():
        digits = [code // base**p % base for p in range(len(REASONS))]
        lists.append([REASONS[d - 1] for d in reversed(digits) if d] or ["prior"])
    return [lists[i] for i in inverse.reshape(-1).tolist()]


#: Bounds of the suggested next fetch without a fetch budget: expected new outlinks to wait for,
#: and the shortest and longest wait in days.
DEFAULT_TARGET_NEW_LINKS = 1.0
DEFAULT_MIN_DAYS = 0.25
DEFAULT_MAX_DAYS = 30.0


def next_fetch_days(
    rate_per_day: np.ndarray,
    *,
    target_new_links: float = DEFAULT_TARGET_NEW_LINKS,
    min_days: float = DEFAULT_MIN_DAYS,
    max_days: float = DEFAULT_MAX_DAYS,
) -> np.ndarray:
    """Days until the expected new outlinks reach ``target_new_links``, within bounds."""
    rate = np.asarray(rate_per_day, np.float64)
    with np.errstate(divide="ignore"):
        days = np.where(rate > 0, target_new_links / np.maximum(rate, 1e-300), np.inf)
    return np.clip(days, min_days, max_days)
