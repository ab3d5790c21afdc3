"""The batch model, refreshed as the stream goes on: when, on what, and when it takes over.

The scorer hands `BatchRefresher` every labelled row as its epoch learns it (the page's
feature row at its previous fetch and the new outlinks found at the next one). The refresher
keeps the most recent ``max_rows`` of them and, at an epoch boundary, fits a new model when
the labels seen have grown by ``growth`` since the last fit (a geometric schedule: frequent
while a site is young, rarer as the model has more to stand on). Only rows whose labels were
observed before the boundary are used.

Where the new model takes over is fixed by the stream, never by the clock, so a replay is
deterministic: a small training set (at most ``sync_rows`` rows) is fitted at the boundary and
used from it; a larger one is fitted in a background thread while the pipeline goes on, and
takes over at the next epoch boundary (the pipeline waits there only if the fit is not done).

The fitting itself is injected (``trainer``: rows, feature names, counts, interval days ->
a model with ``predict_rates(rows) -> (m, 2)`` new outlinks per day), so the core does no
training-library or file work; ``on_model`` hears of each model that takes over (the replay
registers it).

A refresh that fails (the trainer raises, or ``on_model`` does) is no event's fault: the
events go on being scored, by the model in use before it when the fit failed; ``on_error``
hears of it (the caller logs it) and ``failures`` counts it. The next fit is due when the
labels have grown by ``growth`` again.

>>> class Mean:
...     def __init__(self, rate): self.rate = rate
...     def predict_rates(self, X): return np.tile(self.rate, (len(X), 1))
>>> def fit(X, names, counts, days): return Mean(counts.sum(0) / days.sum())
>>> r = BatchRefresher(fit, RefreshPolicy(min_labels=4, min_positive=1))
>>> r.add(np.zeros((4, 2), np.float32), np.array([[1, 0], [0, 0], [3, 0], [0, 1]]), np.full(4, 2.0))
>>> r.at_epoch(["a", "b"]); r.version
'refresh-000001'
>>> r.predict_rates(np.zeros((1, 2))).tolist()
[[0.5, 0.125]]
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class RateModel(Protocol):
    def predict_rates(self, X: np.ndarray) -> np.ndarray: ...


Trainer = Callable[[np.ndarray, Sequence[str], np.ndarray, np.ndarray], RateModel]
#: Versions of refreshed models (``refresh-000003``) tell them from registered ones.
VERSION_PREFIX = "refresh-"


@dataclass(frozen=True)
class RefreshPolicy:
    """When to refit: after ``min_labels`` labels with ``min_positive`` new-link labels, then
    each time the labels seen grow by ``growth``; on the latest ``max_rows`` rows; fitted at
    the boundary itself up to ``sync_rows`` rows, beyond that in the background."""

    min_labels: int = 300
    min_positive: int = 5
    growth: float = 1.5
    max_rows: int = 20_000
    sync_rows: int = 10_000


class BatchRefresher:
    """Training rows, the refresh schedule and the model in use (see the module docstring)."""

    def __init__(
        self,
        trainer: Trainer,
        policy: RefreshPolicy | None = None,
        on_model: Callable[[str, RateModel, dict[str, Any]], None] | None = None,
        on_error: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        self.trainer = trainer
        self.policy = policy or RefreshPolicy()
        self.on_model = on_model
        self.on_error = on_error
        self.labels_seen = 0
        self.positives_seen = 0
        self.labels_at_fit = 0
        self.fits = 0
        self.failures = 0
        #: the versions that took over, in order
        self.versions: list[str] = []
        self.version: str | None = None
        self.model: RateModel | None = None
        self._rows: np.ndarray | None = None  # ring buffer of feature rows (float32)
        self._counts = np.zeros((0, 2), np.float32)
        self._days = np.zeros(0, np.float32)
        self._filled = 0
        self._next = 0
        self._pending: tuple[threading.Thread, dict[str, Any]] | None = None

    # -- rows --------------------------------------------------------------------------------

    def add(self, rows: np.ndarray, counts: np.ndarray, days: np.ndarray) -> None:
        """Labelled rows in stream order (they enter the next fit)."""
        if not len(rows):
            return
        cap = self.policy.max_rows
        self.labels_seen += len(counts)  # every label, those past the cap's reach included
        self.positives_seen += int((np.asarray(counts).sum(axis=1) > 0).sum())
        if self._rows is None:
            self._rows = np.zeros((cap, rows.shape[1]), np.float32)
            self._counts = np.zeros((cap, 2), np.float32)
            self._days = np.zeros(cap, np.float32)
        rows, counts, days = rows[-cap:], counts[-cap:], days[-cap:]
        at = (self._next + np.arange(len(rows))) % cap
        self._rows[at] = rows
        self._counts[at] = counts
        self._days[at] = days
        self._next = int((self._next + len(rows)) % cap)
        self._filled = min(cap, self._filled + len(rows))

    def training_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kept rows, oldest first (copies: a background fit owns them)."""
        if self._rows is None:
            empty = np.zeros((0, 0), np.float32)
            return empty, np.zeros((0, 2), np.float32), np.zeros(0, np.float32)
        order = (self._next - self._filled + np.arange(self._filled)) % self.policy.max_rows
        return self._rows[order].copy(), self._counts[order].copy(), self._days[order].copy()

    # -- the schedule ------------------------------------------------------------------------

    def due(self) -> bool:
        p = self.policy
        return (
            self.labels_seen >= p.min_labels
            and self.positives_seen >= p.min_positive
            and self.labels_seen >= p.growth * self.labels_at_fit
        )

    def at_epoch(self, names: Sequence[str]) -> None:
        """An epoch boundary: the model fitted in the background since the last one takes
        over (waiting for it if need be), then a new fit starts if one is due."""
        self._take_over_pending()
        if not self.due():
            return
        X, counts, days = self.training_rows()
        self.labels_at_fit = self.labels_seen
        self.fits += 1
        version = f"{VERSION_PREFIX}{self.fits:06d}"
        info = {
            "rows": len(X),
            "labels_seen": self.labels_seen,
            "positive_rows": int((counts.sum(axis=1) > 0).sum()),
        }
        job: dict[str, Any] = {"version": version, "info": info}
        if len(X) <= self.policy.sync_rows:
            self._fit_into(job, X, list(names), counts, days)
            self._take_over(job)
            return
        thread = threading.Thread(
            target=self._fit_into, args=(job, X, list(names), counts, days), daemon=True
        )
        thread.start()
        self._pending = (thread, job)

    def _fit_into(self, job: dict[str, Any], *args: Any) -> None:
        try:
            job["model"] = self.trainer(*args)
        except Exception as exc:  # reported at the switch, in the pipeline's thread
            job["error"] = exc

    def _take_over_pending(self) -> None:
        if self._pending is None:
            return
        thread, job = self._pending
        thread.join()
        self._pending = None
        self._take_over(job)

    def _take_over(self, job: dict[str, Any]) -> None:
        """The job's model takes over; a failed fit leaves the model in use as it was."""
        if "error" in job:
            self._failed(job["version"], job["error"])
            return
        self.model = job["model"]
        self.version = job["version"]
        self.versions.append(job["version"])
        if self.on_model is None:
            return
        try:
            self.on_model(job["version"], job["model"], job["info"])
        except Exception as exc:  # the model is in use all the same: the stream decides that
            self._failed(job["version"], exc)

    def _failed(self, version: str, exc: BaseException) -> None:
        self.failures += 1
        if self.on_error is not None:
            self.on_error(version, exc)

    def wait(self) -> None:
        """Let a background fit finish and take over (end of a replay, a snapshot)."""
        self._take_over_pending()

    def predict_rates(self, X: np.ndarray) -> np.ndarray | None:
        """The model in use's rates per day (m, 2), or None before the first fit."""
        return None if self.model is None else np.asarray(self.model.predict_rates(X))
