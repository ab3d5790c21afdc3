"""Learned scorers: ``online`` (River, learns as labels arrive), ``batch`` (a registered
ExtraTrees / NGBoost / HGB model, refreshed without a restart) and ``ensemble`` (both).

All three go through `online.priority.combine`, so they give the same kind of priority:
expected new outlinks over the horizon, P(>= 1), a rate per day, reason codes and the model
versions. The transparent ``lbla`` formula stands in while the online learner warms up (its
weight fades as labels arrive) and whenever no batch model is at hand.

Scorers that learn (``learns = True``) are called by the pipeline with each row's label as it
arrives: `score_and_learn`. Their state (`state` / `restore`) is the online learner, which the
pipeline asks its store to keep with the page records.

The batch model comes from ``model_source``: a callable returning the current artifact (an
object with ``version`` and ``model``) or None. The registry's watcher is such a callable; the
core does no file I/O itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from online.learners import Label, LinkLearner, StreamLearner
from online.priority import DEFAULT_EXPLORATION, DEFAULT_HORIZON_DAYS, Estimate, combine
from online.scoring import LBLAScorer, Scores, _MatrixScorer

ModelSource = Callable[[], Any]


class _LearnedScorer(_MatrixScorer):
    """Shared plumbing: the LBLA stand-in, exploration, reasons, the batch model."""

    name = "learned"
    version = "1"
    learns = False
    uses_batch = False
    #: Final weights once warm; LBLA takes the rest. Blending the learner with the formula
    #: beat either alone on generated crawls (yield@10%, rounds 3-9: 0.735 blended at 0.3-0.5
    #: against 0.733 LBLA and 0.706 the learner alone).
    online_weight = 0.5
    batch_weight = 0.5

    def __init__(
        self,
        *,
        model_source: ModelSource | None = None,
        horizon_days: float = DEFAULT_HORIZON_DAYS,
        exploration: float = DEFAULT_EXPLORATION,
        history: int = 8,
        warmup: int = 2000,
        learn_every: int = 64,
        learner: LinkLearner | None = None,
        online_weight: float | None = None,
        batch_weight: float | None = None,
    ) -> None:
        self.model_source = model_source
        if online_weight is not None:
            self.online_weight = online_weight
        if batch_weight is not None:
            self.batch_weight = batch_weight
        self.horizon_days = horizon_days
        self.exploration = exploration
        self.history = history
        self.warmup = warmup
        self.learn_every = learn_every
        self.lbla = LBLAScorer()
        self._learner_template = learner
        self.stream: StreamLearner | None = None

    # -- state -------------------------------------------------------------------------------

    def state(self) -> StreamLearner | None:
        return self.stream

    def restore(self, state: object) -> None:
        if not isinstance(state, StreamLearner):
            raise TypeError(f"expected a StreamLearner, got {type(state).__name__}")
        self.stream = state

    # -- scoring -----------------------------------------------------------------------------

    def score_matrix(self, X: np.ndarray, columns: Mapping[str, int]) -> Scores:
        """Scores without learning (the learner, if any, as it stands)."""
        return self._scores(X, columns, online=self._online_predict(X, columns))

    def score_and_learn(
        self,
        X: np.ndarray,
        columns: Mapping[str, int],
        previous: Sequence[np.ndarray | None],
        labels: Sequence[Label | None],
    ) -> Scores:
        online = None
        if self.learns:
            stream = self._stream(columns)
            online = stream.score_and_learn(X, previous, labels)
        return self._scores(X, columns, online=online)

    # -- parts -------------------------------------------------------------------------------

    def _stream(self, columns: Mapping[str, int]) -> StreamLearner:
        names = sorted(columns, key=columns.__getitem__)
        if self.stream is None:
            learner = self._learner_template or LinkLearner(reference_days=self.horizon_days)
            self.stream = StreamLearner(names, learner, learn_every=self.learn_every)
        elif self.stream.feature_names != names:
            raise ValueError("the online learner was trained on other features")
        return self.stream

    def _online_predict(self, X: np.ndarray, columns: Mapping[str, int]) -> dict | None:
        if not self.learns or self.stream is None:
            return None
        return self.stream.score_and_learn(X, [None] * len(X), [None] * len(X))

    def _scores(self, X: np.ndarray, columns: Mapping[str, int], online: dict | None) -> Scores:
        c = self.lbla.components(X, columns, self.horizon_days)
        n = len(X)
        parts: list[tuple[str, Estimate, np.ndarray]] = []
        models: dict[str, str] = {}
        learned_weight = np.zeros(n)
        if online is not None:
            w = self.online_weight * np.minimum(online["n_learned"] / max(self.warmup, 1), 1.0)
            parts.append(("online", _estimate(online), w))
            learned_weight = learned_weight + w
            learner = self.stream.learner  # type: ignore[union-attr]
            models["online"] = f"river-{learner.kind}-{self.version}"
        artifact = self._batch_artifact()
        if artifact is not None:
            w = np.full(n, self.batch_weight)
            parts.append(("batch", self._batch_estimate(artifact, X, columns), w))
            learned_weight = learned_weight + w
            models["batch"] = str(artifact.version)
        lbla = Estimate(c["internal"], c["external"], c["p_internal"], c["p_external"])
        parts.append(("lbla", lbla, np.maximum(1.0 - learned_weight, 0.0)))
        intervals = X[:, columns["dp_intervals"]] if "dp_intervals" in columns else np.zeros(n)
        related = columns.get("dn_related_coverage")
        related_known = np.zeros(n, bool) if related is None else np.nan_to_num(X[:, related]) > 0
        scores = combine(
            parts,
            intervals=intervals,
            history=self.history,
            own_share=c["own_share"],
            related_known=related_known,
            horizon_days=self.horizon_days,
            exploration=self.exploration,
            models=models,
        )
        return scores

    def _batch_artifact(self) -> Any:
        if not self.uses_batch or self.model_source is None:
            return None
        return self.model_source()

    def _batch_estimate(self, artifact: Any, X: np.ndarray, columns: Mapping[str, int]) -> Estimate:
        model = artifact.model
        idx = [columns.get(name, -1) for name in model.feature_names_]
        Xm = np.full((len(X), len(idx)), np.nan)
        have = [j for j, i in enumerate(idx) if i >= 0]
        Xm[:, have] = X[:, [idx[j] for j in have]]
        pred = model.predict(Xm)
        scale = self.horizon_days / float(model.interval_days_)
        std = None if pred.std_total is None else np.asarray(pred.std_total) * scale
        return Estimate(
            np.asarray(pred.internal) * scale,
            np.asarray(pred.external) * scale,
            np.asarray(pred.p_internal),
            np.asarray(pred.p_external),
            std,
        )


def _estimate(online: dict) -> Estimate:
    return Estimate(online["internal"], online["external"], online["p_internal"],
                    online["p_external"])  # fmt: skip


class OnlineScorer(_LearnedScorer):
    """River learners updated as labels arrive; LBLA stands in while they warm up.

    >>> s = OnlineScorer(warmup=10)
    >>> X, cols = np.array([[3.0, 7.0]]), {"dp_new_internal_1": 0, "dp_interval_days_1": 1}
    >>> first = s.score_and_learn(X, cols, [None], [None])
    >>> first.reasons[0][0]  # nothing learned yet: the transparent formula speaks
    'own_history'
    """

    name = "online"
    learns = True


class BatchScorer(_LearnedScorer):
    """The registered batch model (refreshed by its source); LBLA until one exists."""

    name = "batch"
    uses_batch = True
    batch_weight = 1.0


class EnsembleScorer(_LearnedScorer):
    """Online and batch estimates averaged (LBLA fills in while neither is ready)."""

    name = "ensemble"
    learns = True
    uses_batch = True
    online_weight = 0.25
    batch_weight = 0.5


LEARNED_SCORERS: dict[str, type[_LearnedScorer]] = {
    "online": OnlineScorer,
    "batch": BatchScorer,
    "ensemble": EnsembleScorer,
}
