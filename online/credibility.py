"""How much a page's own history should count against a prior: Bühlmann credibility.

A page's rate of new outlinks is estimated as ``Z * own + (1 - Z) * prior`` with
``Z = n / (n + k)`` for ``n`` observed intervals. The credibility constant ``k`` is the ratio
of the noise within one page's intervals to the spread of pages' true rates around the prior
(Bühlmann, "Experience rating and credibility", ASTIN Bulletin 1967): a site whose pages differ
a lot and steadily (news: tickers against imprint pages) gets a small ``k``, so a few
intervals of a page's own history outweigh any prior; a sparse, bursty site (documentation:
a page gains a link when someone edits it) gets a large ``k``, so the prior carries the
ranking. The better a prior predicts pages' rates, the smaller the spread around it and the
larger its ``k``: the estimate leans on the prior exactly as far as the prior has earned.

``k`` is counted in intervals, not days, so it means the same for 12-hourly and monthly crawls,
and pages with equal evidence (the same number of intervals without a new link) keep equal
estimates under a flat prior.

Moments are accumulated over every labelled row the stream has shown (a page's window of
interval rates plus its label), by the nonparametric estimators:
``s2 = sum of within-page squares / degrees of freedom`` and
``a = mean((page mean - prior)^2) - s2 * mean(1 / n)``; ``k = s2 / a``.

>>> rng = np.random.default_rng(0)
>>> true = rng.gamma(0.5, 4.0, size=(3000, 1))           # pages differ a lot
>>> rates = rng.poisson(np.repeat(true, 6, axis=1)) * 1.0  # six intervals each
>>> spread = Credibility(1)
>>> spread.learn(rates, np.ones_like(rates, bool), np.full((3000, 1), rates.mean()))
>>> bool(spread.k()[0] < 1.0)      # own history dominates after one interval
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

#: Bounds of k in intervals: from "one interval is nearly everything" to "the prior decides".
K_MIN, K_MAX = 0.05, 1000.0


class CredibilityTerms(NamedTuple):
    """Per page with two or more observed intervals, what its moments add: the squared
    deviations from its mean, its number of intervals, and (mean - prior)^2 per prior."""

    squares: np.ndarray  # (u,)
    n: np.ndarray  # (u,)
    between: np.ndarray  # (u, priors)


def credibility_terms(
    rates: np.ndarray, present: np.ndarray, priors: np.ndarray
) -> CredibilityTerms:
    """The rows' terms of the moments (see `Credibility.learn` for the arguments); row by
    row, so the terms of runs of rows joined are those of the rows taken together."""
    n = present.sum(axis=1).astype(np.float64)
    use = n >= 2
    values = np.where(present, rates, 0.0)[use]
    n = n[use]
    mean = values.sum(axis=1) / n
    squares = np.where(present[use], (values - mean[:, None]) ** 2, 0.0).sum(axis=1)
    return CredibilityTerms(squares, n, (mean[:, None] - priors[use]) ** 2)


def joined_terms(parts: Sequence[CredibilityTerms]) -> CredibilityTerms:
    """Several runs' terms as one run's."""
    if len(parts) == 1:
        return parts[0]
    return CredibilityTerms(*(np.concatenate(field) for field in zip(*parts, strict=True)))


class Credibility:
    """Bühlmann's k for ``priors`` competing priors (columns), from accumulated moments."""

    def __init__(self, priors: int, default_k: float = 1.0) -> None:
        self.priors = priors
        self.default_k = default_k
        self.within = 0.0  # sum of squared deviations from each page's mean
        self.dof = 0.0  # sum of (n - 1)
        self.between = np.zeros(priors)  # sum of (page mean - prior)^2
        self.pages = 0.0
        self.inverse_n = 0.0  # sum of 1 / n

    def learn(self, rates: np.ndarray, present: np.ndarray, priors: np.ndarray) -> None:
        """Rows are pages (as of a labelled fetch): ``rates`` (m, n) interval rates,
        ``present`` (m, n) which are observed, ``priors`` (m, priors) each prior's rate."""
        self.learn_terms(credibility_terms(rates, present, priors))

    def learn_terms(self, terms: CredibilityTerms) -> None:
        """Accumulate the moments of `credibility_terms` (of one run of rows, or of several
        joined by `joined_terms`: the same sums either way)."""
        if not len(terms.n):
            return
        self.within += float(terms.squares.sum())
        self.dof += float((terms.n - 1).sum())
        self.between += terms.between.sum(axis=0)
        self.pages += float(len(terms.n))
        self.inverse_n += float((1.0 / terms.n).sum())

    def k(self) -> np.ndarray:
        """k per prior (the default until enough pages with two or more intervals were seen)."""
        if self.pages < 10 or self.dof <= 0:
            return np.full(self.priors, self.default_k)
        s2 = self.within / self.dof
        spread = self.between / self.pages - s2 * self.inverse_n / self.pages
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.where(spread > 0, s2 / np.maximum(spread, 1e-300), K_MAX)
        if s2 <= 0:
            k = np.full(self.priors, K_MIN)
        return np.clip(k, K_MIN, K_MAX)

    def state(self) -> dict[str, object]:
        return {
            "priors": self.priors,
            "default_k": self.default_k,
            "within": self.within,
            "dof": self.dof,
            "between": self.between.tolist(),
            "pages": self.pages,
            "inverse_n": self.inverse_n,
        }

    @classmethod
    def from_state(cls, state: dict) -> Credibility:
        out = cls(int(state["priors"]), float(state["default_k"]))
        out.within = float(state["within"])
        out.dof = float(state["dof"])
        out.between = np.asarray(state["between"], dtype=np.float64)
        out.pages = float(state["pages"])
        out.inverse_n = float(state["inverse_n"])
        return out
