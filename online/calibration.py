"""P(at least one new outlink) as this stream has shown it for pages with a given expectation.

New outlinks are over-dispersed: a page expected to show two in an interval often shows none,
then ten. The Poisson reading, ``1 - exp(-mu)``, overstates the chance of any; this class
learns instead, from labelled fetches, how often a page whose expected count was ``mu``
showed at least one, in bins of ``log10(mu)`` (five a decade), each bin starting from the
Poisson value with the weight of one observation. Deterministic, a few hundred numbers.

>>> cal = AnyLinkCalibration()
>>> mu = np.full(1000, 2.0)
>>> cal.learn(mu, np.arange(1000) % 4 == 0)          # a quarter of them showed one
>>> import math
>>> round(float(cal.predict(np.array([2.0]))[0]), 2), round(1 - math.exp(-2.0), 2)
(0.25, 0.86)
"""

from __future__ import annotations

import numpy as np

_LOW, _HIGH, _PER_DECADE = -6.0, 4.0, 5
_BINS = int((_HIGH - _LOW) * _PER_DECADE)


def _bin(mu: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        at = np.floor((np.log10(np.maximum(mu, 1e-300)) - _LOW) * _PER_DECADE)
    return np.clip(at, 0, _BINS - 1).astype(np.int64)


class AnyLinkCalibration:
    """Observed share of labels with a new link, per bin of the expected count."""

    def __init__(self) -> None:
        self.seen = np.zeros(_BINS)
        self.positive = np.zeros(_BINS)

    def learn(self, mu: np.ndarray, any_new: np.ndarray) -> None:
        """``mu``: each label's expected count over its interval; ``any_new``: whether it had
        at least one new outlink."""
        at = _bin(np.asarray(mu, dtype=np.float64))
        np.add.at(self.seen, at, 1.0)
        np.add.at(self.positive, at, np.asarray(any_new, dtype=np.float64))

    def predict(self, mu: np.ndarray) -> np.ndarray:
        """P(>= 1 new outlink) for expected counts ``mu`` (0 for an expectation of 0)."""
        mu = np.asarray(mu, dtype=np.float64)
        at = _bin(mu)
        centre = 10.0 ** (_LOW + (at + 0.5) / _PER_DECADE)
        poisson = 1.0 - np.exp(-centre)
        p = (self.positive[at] + poisson) / (self.seen[at] + 1.0)
        return np.where(mu > 0, p, 0.0)

    def state(self) -> dict[str, object]:
        return {"seen": self.seen.tolist(), "positive": self.positive.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> AnyLinkCalibration:
        out = cls()
        out.seen = np.asarray(state["seen"], dtype=np.float64)
        out.positive = np.asarray(state["positive"], dtype=np.float64)
        return out
