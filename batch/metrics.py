"""Metrics for one ranking round: how well a recrawl ordering finds pages with new outlinks.

Everything is vectorised over pages (sorts, ``searchsorted`` and cumulative sums; no Python loop
over pages), so a 384,323-page round evaluates in well under a second per ranking.

Ties are handled *in exact expectation* rather than by sampling: when a top-K cut falls inside a
group of tied scores, every page of that group is in the top with probability
(slots left) / (group size). This is the limit of the paper's "ties broken at random, averaged
over 5 realisations", without its noise.

Undefined values (a constant side for Spearman, no positives for recall, ...) come out as
``None``, never NaN, so callers can say "no variation" instead of averaging NaN away.

>>> true = np.array([0, 0, 0, 1, 5, 2])
>>> round(precision_auc(true, true), 6)
1.0
>>> spearman(true * 2.0 + 1, true)
1.0
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import gammaln, xlogy
from scipy.stats import nbinom

__all__ = [
    "DEFAULT_BUDGETS",
    "PERCENTS",
    "Ranked",
    "classification",
    "negbin_loglik",
    "poisson_loglik",
    "precision_at_k",
    "precision_auc",
    "regression",
    "spearman",
    "top_counts",
    "yield_at_budget",
]

#: k in percent for Precision@k%; their mean is the area under the curve.
PERCENTS = np.arange(1, 101)
#: Recrawl budgets (share of pages) for `yield_at_budget`.
DEFAULT_BUDGETS = (0.01, 0.05, 0.10, 0.20)


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


def _expected_overlaps(p: Ranked, t: Ranked, K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expected |predicted top-K ∩ true top-K| and the oracle's, for each K."""
    _, pa0, pa1, fp = p.cut(K)
    tv, tb0, tb1, fq = t.cut(K)
    t_in_p = t.values[p.order]
    overlap = np.empty(len(K))
    for j in range(len(K)):  # over the (<= 100) cuts, not over pages
        full, edge = t_in_p[: pa0[j]], t_in_p[pa0[j] : pa1[j]]
        in_full = np.count_nonzero(full > tv[j]) + fq[j] * np.count_nonzero(full == tv[j])
        in_edge = np.count_nonzero(edge > tv[j]) + fq[j] * np.count_nonzero(edge == tv[j])
        overlap[j] = in_full + fp[j] * in_edge
    # same operation order as above, so pred == true gives bit-identical numbers (P@k == 1.0)
    oracle = tb0 + fq * (0 + fq * (tb1 - tb0))
    return overlap, oracle


def precision_at_k(
    pred: np.ndarray | Ranked,
    true: np.ndarray | Ranked,
    ks: Sequence[float] | np.ndarray = PERCENTS,
) -> np.ndarray:
    """Precision@k%: the expected overlap of predicted and true top-k% pages, oracle-normalised.

    Top size K = ceil(k% * n). A page's probability of being in a top is 1 above the boundary
    tie group, 0 below and (slots left) / (group size) inside it (ties broken at random, taken
    in exact expectation). With p_i for the predicted and q_i for the true ranking, drawn
    independently, the expected overlap is sum_i p_i q_i; it is divided by the oracle's
    sum_i q_i^2 so that a perfect ranking (``pred == true`` or any strictly increasing
    transform of it) scores exactly 1, even when the truth has ties. Without ties in the truth
    the denominator is K, the paper's "share of the true top that is predicted"; a constant
    (or random) score then gets K / n, and in general K^2 / (n * sum_i q_i^2).

    >>> true = np.array([3.0, 2, 1, 0])
    >>> precision_at_k(true, true, [25, 50]).tolist()
    [1.0, 1.0]
    >>> precision_at_k(-true, true, [50]).tolist()
    [0.0]
    >>> precision_at_k(np.zeros(4), true, [50]).tolist()   # constant: K / n
    [0.5]
    """
    p, t = _ranked(pred), _ranked(true)
    _check(p, t)
    K = np.maximum(top_counts(t.n, np.asarray(ks, float) / 100.0), 1)
    overlap, oracle = _expected_overlaps(p, t, K)
    return np.minimum(overlap / oracle, 1.0)


def precision_auc(pred: np.ndarray | Ranked, true: np.ndarray | Ranked) -> float:
    """Area under the Precision@k% curve: the mean of P@k over k = 1, 2, ..., 100 %.

    Perfect ranking = 1, random about 0.5 (for an untied truth). The authors' code integrated
    from 3.33 % only and so topped out at 0.967; this area runs over the whole 1-100 % range.

    >>> true = np.arange(10.0)
    >>> precision_auc(true, true)
    1.0
    >>> round(precision_auc(np.zeros(10), true), 3)   # mean of ceil(k n / 100) / n
    0.55
    """
    return float(precision_at_k(pred, true, PERCENTS).mean())


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


def _ratio(a: float, b: float) -> float | None:
    return float(a / b) if b else None


def classification(
    p: np.ndarray, new_links: np.ndarray, threshold: float = 0.5
) -> dict[str, float | None]:
    """NL metrics: truth = new_links > 0, prediction = p >= threshold; None where undefined.

    >>> m = classification(np.array([0.9, 0.2, 0.7, 0.1]), np.array([3, 0, 0, 1]))
    >>> m["recall"], m["precision"], m["f1"], m["balanced_accuracy"]
    (0.5, 0.5, 0.5, 0.5)
    """
    y = np.asarray(new_links).ravel() > 0
    hat = np.asarray(p, dtype=np.float64).ravel() >= threshold
    tp = int(np.count_nonzero(y & hat))
    fp = int(np.count_nonzero(~y & hat))
    fn = int(np.count_nonzero(y & ~hat))
    tn = int(np.count_nonzero(~y & ~hat))
    recall = _ratio(tp, tp + fn)
    specificity = _ratio(tn, tn + fp)
    bal = None if recall is None or specificity is None else (recall + specificity) / 2
    return {
        "recall": recall,
        "precision": _ratio(tp, tp + fp),
        # With nothing to find, F1 (like recall) has no meaning: a round without new links.
        "f1": None if recall is None else _ratio(2 * tp, 2 * tp + fp + fn),
        "balanced_accuracy": bal,
    }


def regression(pred: np.ndarray, true: np.ndarray) -> dict[str, float | None]:
    """LCR / NNL metrics: R^2 (None for a constant truth), mean and median absolute error.

    >>> regression(np.array([1.0, 2, 3]), np.array([1.0, 2, 4]))
    {'r2': 0.7857142857142857, 'mae': 0.3333333333333333, 'medae': 0.0}
    """
    x = np.asarray(pred, dtype=np.float64).ravel()
    y = np.asarray(true, dtype=np.float64).ravel()
    err = x - y
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return {
        "r2": None if ss_tot == 0 else 1.0 - float(err @ err) / ss_tot,
        "mae": float(np.abs(err).mean()),
        "medae": float(np.median(np.abs(err))),
    }


def poisson_loglik(mu: np.ndarray, y: np.ndarray) -> float:
    """Mean Poisson log-likelihood of counts y under means mu (mu = 0 gives -inf for y > 0).

    >>> round(poisson_loglik(np.array([1.0]), np.array([0])), 6)
    -1.0
    """
    m = np.asarray(mu, dtype=np.float64)
    k = np.asarray(y, dtype=np.float64)
    return float(np.mean(xlogy(k, m) - m - gammaln(k + 1)))


def negbin_loglik(mu: np.ndarray, y: np.ndarray, alpha: float) -> float:
    """Mean NB2 log-likelihood (var = mu + alpha mu^2), the over-dispersed alternative the
    paper calls for; alpha = 0 is the Poisson.

    >>> round(negbin_loglik(np.array([2.0]), np.array([1]), 1e-6), 6) == round(
    ...     poisson_loglik(np.array([2.0]), np.array([1])), 6)
    True
    >>> round(negbin_loglik(np.array([1.0]), np.array([0]), 1.0), 6)   # geometric: P(0) = 1/2
    -0.693147
    """
    if alpha < 0:
        raise ValueError("alpha must be >= 0")
    if alpha == 0:
        return poisson_loglik(mu, y)
    m = np.asarray(mu, dtype=np.float64)
    k = np.asarray(y, dtype=np.float64)
    r = 1.0 / alpha
    return float(np.mean(nbinom.logpmf(k, r, r / (r + m))))
