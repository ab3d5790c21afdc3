"""Weights for competing predictors, learned from their losses on the stream: AdaHedge.

AdaHedge (de Rooij, van Erven, Grünwald and Koolen, "Follow the leader if you can, hedge if
you must", JMLR 2014) is exponentiated weights whose learning rate tunes itself: it follows
the leader while the leader stays ahead, and spreads the weight while the evidence is mixed,
whatever the scale of the losses. So no learning rate has to be set per site: a candidate that
predicts this stream best gets the weight as fast as the evidence allows.

Sleeping experts: a candidate may abstain on a row (a look-around estimate for a page without
related pages, a model not trained yet). It is then charged the mixture's loss on that row, so
abstaining neither gains nor loses weight.

State is plain data (`state` / `from_state`): the cumulative losses and the mixability gap.

>>> hedge = AdaHedge(3)
>>> hedge.weights().tolist()
[0.3333333333333333, 0.3333333333333333, 0.3333333333333333]
>>> for _ in range(20):
...     hedge.learn(np.array([[1.0, 0.2, 0.9]]))
>>> int(np.argmax(hedge.weights())), bool(hedge.weights()[1] > 0.99)
(1, True)
"""

from __future__ import annotations

import math

import numpy as np


class AdaHedge:
    """Exponentiated weights over ``k`` experts with AdaHedge's self-tuning learning rate."""

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError("need at least one expert")
        self.k = k
        self.cumulative = np.zeros(k)
        self.gap = 0.0
        self.rounds = 0

    @property
    def eta(self) -> float:
        """The learning rate: ln(k) / mixability gap (infinite while the gap is zero)."""
        return math.inf if self.gap <= 0 else math.log(max(self.k, 2)) / self.gap

    def weights(self) -> np.ndarray:
        """The current weights (sum 1); all leaders share the weight while eta is infinite."""
        relative = self.cumulative - self.cumulative.min()
        if math.isinf(self.eta):
            w = (relative == 0).astype(np.float64)
        else:
            w = np.exp(-self.eta * relative)
        return w / w.sum()

    def learn(self, losses: np.ndarray) -> None:
        """One round per row of ``losses`` (rounds, k), in order. NaN: the expert abstained
        in that round and is charged the mixture's loss."""
        losses = np.atleast_2d(np.asarray(losses, dtype=np.float64))
        if losses.shape[1] != self.k:
            raise ValueError(f"expected losses for {self.k} experts, got {losses.shape[1]}")
        for loss in losses:
            awake = np.isfinite(loss)
            if not awake.any():
                continue
            w = self.weights()
            w_awake = w[awake] if w[awake].sum() > 0 else np.ones(int(awake.sum()))
            mixed = float(np.dot(w_awake, loss[awake]) / w_awake.sum())
            loss = np.where(awake, loss, mixed)
            mix_loss = float(np.dot(w, loss))
            best = float(loss.min())
            eta = self.eta
            m = float(loss[w > 0].min()) if math.isinf(eta) else _mix_loss(w, loss, best, eta)
            self.gap += max(mix_loss - m, 0.0)
            self.cumulative += loss
            self.rounds += 1

    # -- state as data -----------------------------------------------------------------------

    def state(self) -> dict[str, object]:
        return {"k": self.k, "cumulative": self.cumulative.tolist(), "gap": self.gap,
                "rounds": self.rounds}  # fmt: skip

    @classmethod
    def from_state(cls, state: dict) -> AdaHedge:
        hedge = cls(int(state["k"]))
        hedge.cumulative = np.asarray(state["cumulative"], dtype=np.float64)
        hedge.gap = float(state["gap"])
        hedge.rounds = int(state["rounds"])
        return hedge


def _mix_loss(w: np.ndarray, loss: np.ndarray, best: float, eta: float) -> float:
    """The mix loss −ln(Σ w e^(−η loss)) / η. Where the sum underflows (a large η and all the
    weight on experts far from the best loss), it is taken in logs, over the experts with
    weight: the same value, which the direct sum cannot represent.

    >>> _mix_loss(np.array([1.0, 0.0]), np.array([1000.0, 0.0]), 0.0, 5.0)
    1000.0
    """
    total = float(np.dot(w, np.exp(-eta * (loss - best))))
    if total > 0.0:
        return best - math.log(total) / eta
    held = w > 0
    z = np.log(w[held]) - eta * (loss[held] - best)
    top = float(z.max())
    return best - (top + math.log(float(np.exp(z - top).sum()))) / eta
