"""Ranking measures the scorer itself uses on its stream, and the evaluation on whole runs.

How well a ranking of pages finds their new outlinks: the share of new outlinks found by
recrawling the top share of pages (`yield_at_budget`) and Spearman's rank correlation, ties
taken in exact expectation (`Ranked.cut`). Pure numpy: the default scorer measures its
candidates with them on the labels the stream brings (`online.blending`), and
`batch.metrics` builds the evaluation's other metrics on them.

>>> y = np.array([5.0, 0, 1, 0])
>>> yield_at_budget(np.array([2.0, 1, 3, 0]), y, (0.5,))[0.5]["relative"]
1.0
>>> spearman(np.array([2.0, 1, 3, 0]), y)
0.7378647873726218
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_BUDGETS",
    "Ranked",
    "significant",
    "spearman",
    "top_counts",
    "yield_at_budget",
]

#: Recrawl budgets (share of pages) for `yield_at_budget`.
DEFAULT_BUDGETS = (0.01, 0.05, 0.10, 0.20)


def significant(x: np.ndarray, digits: int = 12) -> np.ndarray:
    """``x`` rounded to ``digits`` significant digits: float noise below them removed, so
    equal estimates reached by different sums (7/8 + 0/8 against 5/8 + 2/8) rank as ties.

    >>> bool(significant(np.array([7 / 8 + 0 / 8]))[0] == significant(np.array([5 / 8 + 2 / 8]))[0])
    True
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log10(np.abs(x)))
    scale = np.where(np.isfinite(exponent), 10.0 ** (digits - 1 - exponent), 1.0)
    return np.round(x * scale) / scale


def top_counts(n: int, shares: Iterable[float] | np.ndarray) -> np.ndarray:
    """Top sizes K = ceil(share * n), robust to float noise (0.07 * 100 is not above 7).

    >>> top_counts(100, [0.07, 0.5, 1.0]).tolist()
    [7, 50, 100]
    >>> top_counts(3, [0.01]).tolist()
    [1]
    """
    raw = np.asarray(list(shares) if not isinstance(shares, np.ndarray) else shares, float) * n
    return np.clip(np.ceil(np.round(raw, 9)).astype(np.int64), 0, n)


@dataclass
class Ranked:
    """One side of a comparison, sorted once and reused for every metric and every partner.

    ``order`` sorts descending (stably); ``desc`` holds the sorted values.
    """

    values: np.ndarray
    order: np.ndarray = field(init=False, repr=False)
    desc: np.ndarray = field(init=False, repr=False)
    _ranks: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        x = np.asarray(self.values, dtype=np.float64).ravel()
        if x.size == 0:
            raise ValueError("need at least one page")
        if not np.isfinite(x).all():
            raise ValueError("values must be finite (no NaN or inf)")
        self.values = x
        self.order = np.argsort(-x, kind="stable")
        self.desc = x[self.order]

    @property
    def n(self) -> int:
        return int(self.values.size)

    @property
    def constant(self) -> bool:
        return bool(self.desc[0] == self.desc[-1])

    def ranks(self) -> np.ndarray:
        """Average ranks (1 = smallest), as Spearman's rho uses them."""
        if self._ranks is None:
            n = self.n
            asc = self.desc[::-1]
            starts = np.flatnonzero(np.r_[True, asc[1:] != asc[:-1]])
            ends = np.r_[starts[1:], n]
            avg = (starts + ends + 1) / 2.0
            ranks = np.empty(n)
            ranks[self.order[::-1]] = np.repeat(avg, ends - starts)
            self._ranks = ranks
        return self._ranks

    def cut(self, K: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For top sizes K (>= 1): the boundary value, the tie group [a0, a1) in sorted order
        holding position K-1, and each page's in-top probability inside that group."""
        asc = self.desc[::-1]
        v = self.desc[K - 1]
        a0 = self.n - np.searchsorted(asc, v, side="right")
        a1 = self.n - np.searchsorted(asc, v, side="left")
        return v, a0, a1, (K - a0) / (a1 - a0)


def _ranked(x: np.ndarray | Ranked) -> Ranked:
    return x if isinstance(x, Ranked) else Ranked(np.asarray(x))


def _check(pred: Ranked, true: Ranked) -> None:
    if pred.n != true.n:
        raise ValueError(f"pred has {pred.n} pages, true has {true.n}")


def spearman(pred: np.ndarray | Ranked, true: np.ndarray | Ranked) -> float | None:
    """Spearman's rho with average ranks for ties; None when either side is constant.

    >>> spearman(np.array([1.0, 2, 3]), np.array([3.0, 2, 1]))
    -1.0
    >>> spearman(np.array([1.0, 2, 3]), np.zeros(3)) is None
    True
    """
    p, t = _ranked(pred), _ranked(true)
    _check(p, t)
    if p.constant or t.constant:
        return None
    a = p.ranks() - p.ranks().mean()
    b = t.ranks() - t.ranks().mean()
    rho = float(a @ b / np.sqrt((a @ a) * (b @ b)))
    return max(-1.0, min(1.0, rho))


def yield_at_budget(
    pred: np.ndarray | Ranked,
    new_links: np.ndarray,
    budgets: Sequence[float] = DEFAULT_BUDGETS,
) -> dict[float, dict[str, Any]]:
    """Share of all new outlinks found by recrawling the top ``budget`` share of pages by pred.

    Ties at the cut are taken in expectation as in `precision_at_k`. ``best`` is the share an
    oracle (ranking by ``new_links``) gets with the same budget; ``relative`` = share / best.
    When no page has a new link, share, best and relative are None and ``no_new_links`` True.

    >>> y = np.array([10.0, 0, 0, 5, 0])
    >>> r = yield_at_budget(np.array([1.0, 0, 0, 2, 0]), y, budgets=(0.2,))[0.2]
    >>> round(r["share"], 3), round(r["best"], 3), round(r["relative"], 3), r["no_new_links"]
    (0.333, 0.667, 0.5, False)
    """
    p = _ranked(pred)
    y = np.asarray(new_links, dtype=np.float64).ravel()
    if y.size != p.n:
        raise ValueError(f"pred has {p.n} pages, new_links has {y.size}")
    total = float(y.sum())
    K = np.maximum(top_counts(p.n, budgets), 1)
    out: dict[float, dict[str, Any]] = {}
    if total <= 0:
        for b in budgets:
            out[b] = {"share": None, "best": None, "relative": None, "no_new_links": True}
        return out
    _, a0, a1, frac = p.cut(K)
    found = np.r_[0.0, np.cumsum(y[p.order])]
    share = (found[a0] + frac * (found[a1] - found[a0])) / total
    best = np.r_[0.0, np.cumsum(-np.sort(-y))][K] / total
    for j, b in enumerate(budgets):
        s, o = float(share[j]), float(best[j])
        rel = min(s / o, 1.0) if o > 0 else None
        out[b] = {"share": s, "best": o, "relative": rel, "no_new_links": False}
    return out
