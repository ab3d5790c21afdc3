"""The count distribution and the probability correction the batch link models rest on.

NB2, the negative binomial with var = mu + alpha mu^2 (the Poisson as alpha -> 0): its
log-pmf, its P(y = 0) and the maximum-likelihood alpha for fixed means, for the ``negbin``
and ``hurdle`` kinds and every kind's held-out log-likelihood (`batch.models.LinkModel`).
And the class-balance correction: a classifier trained with balanced classes gives odds
scaled by the base rate; `calibrated` undoes that and `balanced` redoes it.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import gammaln, xlogy

#: The smallest dispersion told apart from the Poisson, and the floor of a denominator.
EPS = 1e-9
_MU_FLOOR = 1e-6


def nb_logpmf(y: np.ndarray, mu: np.ndarray, alpha: float) -> np.ndarray:
    """NB2 log-pmf (var = mu + alpha mu^2); alpha -> 0 is the Poisson."""
    mu = np.maximum(mu, _MU_FLOOR)
    if alpha <= EPS:
        return xlogy(y, mu) - mu - gammaln(y + 1)
    r = 1.0 / alpha
    return (
        gammaln(y + r)
        - gammaln(r)
        - gammaln(y + 1)
        + r * np.log(r / (r + mu))
        + xlogy(y, mu / (r + mu))
    )


def nb_p0(mu: np.ndarray, alpha: float) -> np.ndarray:
    """NB2 P(y = 0); the Poisson's e^-mu as alpha -> 0."""
    mu = np.maximum(mu, 0.0)
    if alpha <= EPS:
        return np.exp(-mu)
    return (1.0 + alpha * mu) ** (-1.0 / alpha)


def fit_alpha(y: np.ndarray, mu: np.ndarray) -> float:
    """Maximum-likelihood NB2 dispersion for counts y with fixed means mu."""
    if len(y) == 0:
        return 0.0

    def nll(log_alpha: float) -> float:
        return -float(nb_logpmf(y, mu, float(np.exp(log_alpha))).mean())

    res = minimize_scalar(nll, bounds=(np.log(1e-6), np.log(1e3)), method="bounded")
    alpha = float(np.exp(res.x))
    return alpha if nll(res.x) < -float(nb_logpmf(y, mu, 0.0).mean()) else 0.0


def balanced(p: np.ndarray, base_rate: float) -> np.ndarray:
    """A calibrated P(y > 0) as the class-balanced classifier would give it (0.5 <=> p = rate)."""
    if base_rate <= 0 or base_rate >= 1:
        return p
    a = p * (1 - base_rate)
    b = (1 - p) * base_rate
    return a / np.maximum(a + b, EPS)


def calibrated(p_balanced: np.ndarray, base_rate: float) -> np.ndarray:
    """Undo class balancing: odds times base_rate / (1 - base_rate)."""
    if base_rate <= 0 or base_rate >= 1:
        return p_balanced
    a = p_balanced * base_rate
    b = (1 - p_balanced) * (1 - base_rate)
    return a / np.maximum(a + b, EPS)
