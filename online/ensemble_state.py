"""What the learned scorer has learned, as data that a page store keeps between batches.

`EnsembleState` is everything `online.learned.EnsembleScorer` carries from one batch to the
next: the candidates' AdaHedge weights, the site's rates and rhythm (`online.site`), the
credibility of each prior, the P(>= 1) calibration, the River learner, the labels waiting for
the next epoch, and which ranking option (`online.blending`) is in use since when. The pipeline
writes it with each batch's page records (the live worker to Redis) and restores it at start,
or after a failed batch.

It is stored as data (`online.state_codec`), never as a pickle: a blob read back from a store
that others can write cannot run code. Kept apart from the scorer so that what is stored, and
how it is read back, is in one short module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from online import state_codec
from online.blending import ANCHOR
from online.calibration import AnyLinkCalibration
from online.candidates import PRIORS
from online.credibility import Credibility
from online.hedge import AdaHedge
from online.learners import LinkLearner
from online.site import SiteStats


class PendingLabels:
    """Labelled feature rows waiting for the next epoch, in the order they arrived: rows
    (float32, one per labelled fetch: its page's row at the previous fetch) and their labels
    (float64: new internal, new external, interval days, content changed 0 / 1, the time the
    label was observed).

    Kept as one block of each per batch, not an array and a tuple per row: a site's whole round
    can wait here, so at a million pages this is hundreds of megabytes less. Blocks are
    read-only and `take` only drops references, so a copy (`copy.deepcopy` included: what a
    checkpoint takes before every batch) shares them and costs a list per batch, not per row.

    >>> pending = PendingLabels()
    >>> pending.add(np.ones((2, 3)), np.array([[1, 0, 7, 1, 10.0], [0, 0, 7, 0, 20.0]]))
    >>> len(pending), pending.count_before(15.0), float(pending.first()[4])
    (2, 1, 10.0)
    >>> rows, labels = pending.take(1)
    >>> rows.shape, float(labels[0, 0]), len(pending), float(pending.first()[4])
    ((1, 3), 1.0, 1, 20.0)
    """

    def __init__(self) -> None:
        self._rows: list[np.ndarray] = []
        self._labels: list[np.ndarray] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, rows: np.ndarray, labels: np.ndarray) -> None:
        """Append rows (n, F) and their labels (n, 5); nothing for n = 0."""
        if not len(labels):
            return
        rows = np.array(rows, dtype=np.float32)  # a copy of its own: it is made read-only
        labels = np.array(labels, dtype=np.float64).reshape(-1, 5)
        if len(rows) != len(labels):
            raise ValueError(f"{len(rows)} pending rows for {len(labels)} labels")
        rows.flags.writeable = labels.flags.writeable = False
        self._rows.append(rows)
        self._labels.append(labels)
        self._count += len(labels)

    def first(self) -> np.ndarray | None:
        """The oldest waiting label, or None."""
        return self._labels[0][0] if self._labels else None

    def count_before(self, now: float) -> int:
        """How many waiting labels were observed before ``now``."""
        return sum(int(np.count_nonzero(block[:, 4] < now)) for block in self._labels)

    def take(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The oldest ``k`` rows and labels, no longer waiting."""
        rows: list[np.ndarray] = []
        labels: list[np.ndarray] = []
        while k > 0 and self._labels:
            block_rows, block_labels = self._rows[0], self._labels[0]
            if len(block_labels) <= k:
                rows.append(block_rows)
                labels.append(block_labels)
                del self._rows[0], self._labels[0]
            else:  # the rest stays, as a view of the same read-only block
                rows.append(block_rows[:k])
                labels.append(block_labels[:k])
                self._rows[0], self._labels[0] = block_rows[k:], block_labels[k:]
            taken = len(labels[-1])
            self._count -= taken
            k -= taken
        if not labels:
            return np.empty((0, 0), np.float32), np.empty((0, 5), np.float64)
        return np.concatenate(rows), np.concatenate(labels)

    def all(self) -> tuple[np.ndarray | None, np.ndarray]:
        """Every waiting row (None if none) and label, without taking them."""
        if not self._labels:
            return None, np.empty((0, 5), np.float64)
        return np.concatenate(self._rows), np.concatenate(self._labels)

    def __deepcopy__(self, memo: dict) -> PendingLabels:
        new = PendingLabels()
        new._rows, new._labels, new._count = list(self._rows), list(self._labels), self._count
        return new


@dataclass
class EnsembleState:
    """What the scorer has learned: plain data but the River learner and the refresher."""

    hedge: AdaHedge
    site: SiteStats = field(default_factory=SiteStats)
    calibration: AnyLinkCalibration = field(default_factory=AnyLinkCalibration)
    credibility: list[Credibility] = field(
        default_factory=lambda: [Credibility(len(PRIORS)) for _ in range(2)]
    )
    learner: LinkLearner | None = None
    feature_names: list[str] | None = None
    last_epoch: float | None = None
    #: the time of the first event the scorer saw (the first epoch is measured from it)
    first_seen: float | None = None
    epochs: int = 0
    pending: PendingLabels = field(default_factory=PendingLabels)
    #: per ranking option, its measured ranking quality on each epoch's labels
    measured: dict[str, list[float]] = field(default_factory=dict)
    #: per tie-breaker, the estimate a silent page needs to be lifted (learned at epochs)
    lift_thresholds: dict[str, float] = field(default_factory=dict)
    #: since the last epoch: per tie-breaker, a histogram of its estimates over the silent
    #: pages scored; and the pages scored, silent and all
    lift_histograms: dict[str, np.ndarray] = field(default_factory=dict)
    scored: list[int] = field(default_factory=lambda: [0, 0])
    #: the site's typical interval (days) the scorer works with: the measured one, taken up
    #: only when it is more than a quarter away from the one in use (a drift must not re-rank
    #: pages scored either side of an epoch); None: `online.learned.DEFAULT_INTERVAL_DAYS`
    interval_days: float | None = None
    #: the ranking option in use, and from which epoch each option was chosen
    choice: str = f"{ANCHOR}+lbla"
    choices: list[tuple[int, str]] = field(default_factory=list)

    #: Kind of the stored blob (`online.state_codec`).
    STATE_KIND = "ensemble-state"

    def to_bytes(self) -> bytes:
        """This state as data (`online.state_codec`): no pickle, so a blob read back from a
        store that others can write cannot run code."""
        rows, labels = self.pending.all()
        data = {
            "hedge": self.hedge.state(),
            "site": self.site.state(),
            "calibration": self.calibration.state(),
            "credibility": [c.state() for c in self.credibility],
            "learner": None if self.learner is None else self.learner.to_data(),
            "feature_names": self.feature_names,
            "last_epoch": self.last_epoch,
            "first_seen": self.first_seen,
            "epochs": self.epochs,
            "pending_rows": rows,
            # (n, 5) float64: exact for the counts, days and times, and 0 / 1 for the flag
            "pending_labels": labels,
            "measured": self.measured,
            "lift_thresholds": self.lift_thresholds,
            "lift_histograms": self.lift_histograms,
            "scored": self.scored,
            "interval_days": self.interval_days,
            "choice": self.choice,
            "choices": [list(c) for c in self.choices],
        }
        return state_codec.dumps(self.STATE_KIND, data)

    @classmethod
    def from_bytes(cls, blob: bytes) -> EnsembleState:
        """The state `to_bytes` wrote; `StateRefused` for anything else (a pickle included)."""
        d = state_codec.loads(blob, cls.STATE_KIND)
        try:
            pending = PendingLabels()
            labels = np.asarray(d["pending_labels"], np.float64).reshape(-1, 5)
            if len(labels):
                pending.add(np.asarray(d["pending_rows"], np.float32), labels)
            return cls(
                hedge=AdaHedge.from_state(d["hedge"]),
                site=SiteStats.from_state(d["site"]),
                calibration=AnyLinkCalibration.from_state(d["calibration"]),
                credibility=[Credibility.from_state(c) for c in d["credibility"]],
                learner=None if d["learner"] is None else LinkLearner.from_data(d["learner"]),
                feature_names=None if d["feature_names"] is None else list(d["feature_names"]),
                last_epoch=_opt_float(d["last_epoch"]),
                first_seen=_opt_float(d["first_seen"]),
                epochs=int(d["epochs"]),
                pending=pending,
                measured={k: [float(v) for v in vs] for k, vs in d["measured"].items()},
                lift_thresholds={k: float(v) for k, v in d["lift_thresholds"].items()},
                lift_histograms={
                    k: np.asarray(v, np.int64) for k, v in d["lift_histograms"].items()
                },
                scored=[int(v) for v in d["scored"]],
                interval_days=_opt_float(d["interval_days"]),
                choice=str(d["choice"]),
                choices=[(int(e), str(c)) for e, c in d["choices"]],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise state_codec.StateRefused(f"bad {cls.STATE_KIND} blob: {exc!r}") from None


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


__all__ = ["EnsembleState"]
