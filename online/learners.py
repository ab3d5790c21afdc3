"""Online learners: River models that learn a page's link change when its next fetch arrives.

A label is a page's new internal / external outlinks at its next fetch; the features are the
ones the page had at its previous fetch. One `LinkLearner` predicts, for a feature dict:

* NNL: the expected new internal / external outlinks over ``reference_days`` (Poisson
  regression; counts of a longer or shorter interval are scaled to it, so the rate per day is
  ``expected / reference_days`` whatever the crawl's rhythm);
* NL: the probability of >= 1 new internal / external outlink (logistic regression);
* LCR: the link change rate, the long-run share of intervals with a new link, which is what
  the NL probability estimates (so it is reported from the same model).

Features go in as River dicts: a missing key is a missing feature, and keys may appear and
vanish mid-stream. Values are squashed with a signed log1p (counts are heavy-tailed), then
a missing feature contributes nothing, in ``learn_one`` and ``learn_many`` alike.

A step never leaves a model non-finite: the linear models are copied before each step and put
back when a weight, the intercept or the optimiser's state came out NaN or infinite (or the
step's inputs were not finite); the step is then skipped and counted in ``n_skipped``. One
extreme row can so cost one mini-batch of learning, never every later score.

`StreamLearner` wraps a `LinkLearner` for the pipeline: it learns in mini-batches of exactly
``learn_every`` labels at fixed places in the stream, so the model that scores an event does
not depend on how the stream was cut into batches (the replay and the live workers agree).

What the linear kind needs of River below its public API (stepping on numpy, row-by-row
scores, its state as data) is in `online.river_glm`.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import river
from river import forest, linear_model, optim, tree

from online.river_glm import (
    all_finite,
    dot_many,
    dot_one,
    finite_model,
    glm_snapshot,
    glm_state,
    learn_matrix,
    restore_glm,
    set_glm_state,
)

Features = Mapping[str, float]
SIDES = ("internal", "external")
KINDS = ("linear", "hoeffding", "arf")
#: Largest log-count a Poisson model may predict (e^8 ~ 3000 new links per interval).
_MAX_LOG = 8.0


class IncompatibleLearner(RuntimeError):
    """A pickled learner made with other library versions than the running ones."""


def library_versions() -> dict[str, str]:
    return {
        "river": river.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def squash(value: float) -> float:
    """Signed log1p: keeps order and sign, tames heavy tails."""
    return math.copysign(math.log1p(abs(value)), value)


class LinkLearner:
    """Online NL / NNL / LCR estimates for both link sides, from dict features.

    Parameters are stored as given (scikit-learn style); the River models are built on first
    use. ``kind``: ``linear`` (default: Poisson and logistic regression, fast), ``hoeffding``
    (Hoeffding trees) or ``arf`` (adaptive random forests, slow, for offline study).

    Examples
    --------
    >>> learner = LinkLearner(seed=1)
    >>> busy, quiet = {"dp_new_internal_1": 9.0}, {"dp_new_internal_1": 0.0}
    >>> for _ in range(300):
    ...     learner.learn_one(busy, {"new_internal": 9, "new_external": 1})
    ...     learner.learn_one(quiet, {"new_internal": 0, "new_external": 0})
    >>> a, b = learner.predict_one(busy), learner.predict_one(quiet)
    >>> a["internal"] > 3 > b["internal"], a["p_internal"] > 0.5 > b["p_internal"]
    (True, True)
    >>> learner.n_learned
    600
    """

    def __init__(
        self,
        kind: str = "linear",
        learning_rate: float = 0.05,
        l2: float = 1e-4,
        reference_days: float = 7.0,
        n_models: int = 5,
        seed: int = 0,
    ) -> None:
        self.kind = kind
        self.learning_rate = learning_rate
        self.l2 = l2
        self.reference_days = reference_days
        self.n_models = n_models
        self.seed = seed
        self.n_learned = 0
        self.n_skipped = 0
        self._models: dict[str, Any] | None = None

    #: Steps skipped because they would have made a model non-finite (a class default, so a
    #: learner saved before the counter existed reads 0).
    n_skipped = 0

    # -- River API ---------------------------------------------------------------------------

    def learn_one(self, x: Features, y: Mapping[str, float]) -> None:
        """Learn one label: ``y`` has ``new_internal``, ``new_external`` and optionally
        ``interval_days`` (counts are scaled to ``reference_days``)."""
        models = self._ensure()
        xs = self._prepare_one(x)
        scale = self._scale(y.get("interval_days"))
        counts = [float(y[f"new_{side}"]) * scale for side in SIDES]
        if not all_finite(np.array([*xs.values(), *counts], dtype=np.float64)):
            self.n_skipped += 1
            return
        saved = self._save()
        for side, count in zip(SIDES, counts, strict=True):
            models[f"nnl_{side}"].learn_one(xs, count)
            models[f"nl_{side}"].learn_one(xs, count > 0)
        if self._undo_if_broken(saved):
            return
        self.n_learned += 1

    def predict_one(self, x: Features) -> dict[str, float]:
        """Expected counts over ``reference_days`` and P(>= 1) per side, plus ``lcr_*``."""
        models = self._ensure()
        xs = self._prepare_one(x)
        out: dict[str, float] = {}
        for side in SIDES:
            out[side] = self._count_one(models[f"nnl_{side}"], xs)
            p = models[f"nl_{side}"].predict_proba_one(xs).get(True, 0.0)
            out[f"p_{side}"] = out[f"lcr_{side}"] = float(p)
        return out

    def learn_many(self, X: pd.DataFrame, Y: pd.DataFrame) -> None:
        """Learn a mini-batch (NaN = missing feature); same columns as ``learn_one``'s y."""
        if len(X) == 0:
            return
        models = self._ensure()
        Xs = self._prepare_many(X)
        days = Y["interval_days"] if "interval_days" in Y else pd.Series(np.nan, index=Y.index)
        scale = np.array([self._scale(d) for d in days.to_numpy(np.float64)])
        if self.kind != "linear":  # trees learn one at a time
            for i, row in enumerate(Xs.to_dict("records")):
                row = {k: v for k, v in row.items() if v != 0.0}
                for side in SIDES:
                    count = float(Y[f"new_{side}"].iloc[i])
                    models[f"nnl_{side}"].learn_one(row, count * scale[i])
                    models[f"nl_{side}"].learn_one(row, count > 0)
            self.n_learned += len(X)
            return
        targets = {side: Y[f"new_{side}"].to_numpy(np.float64) * scale for side in SIDES}
        raw = X.to_numpy(np.float64)
        if not all_finite(
            np.nan_to_num(raw, nan=0.0, posinf=np.inf, neginf=-np.inf), *targets.values()
        ):
            self.n_skipped += 1
            return
        saved = self._save()
        for side in SIDES:
            counts = targets[side]
            models[f"nnl_{side}"].learn_many(Xs, pd.Series(counts, index=Xs.index))
            models[f"nl_{side}"].learn_many(Xs, pd.Series(counts > 0, index=Xs.index))
        if self._undo_if_broken(saved):
            return
        self.n_learned += len(X)

    def learn_array(
        self,
        values: np.ndarray,
        cols: list[str],
        new_internal: np.ndarray,
        new_external: np.ndarray,
        interval_days: np.ndarray,
    ) -> None:
        """`learn_many` on plain arrays (NaN = missing feature), without building frames: the
        pipeline's hot path. The linear kind runs River's own mini-batch step on the matrix
        (`online.river_glm.learn_matrix`): the same numbers as `learn_many`, without its
        frame conversions."""
        if not len(values):
            return
        if self.kind != "linear":
            Y = pd.DataFrame(
                {
                    "new_internal": new_internal,
                    "new_external": new_external,
                    "interval_days": interval_days,
                }
            )
            self.learn_many(pd.DataFrame(values, columns=cols), Y)
            return
        models = self._ensure()
        squashed = np.sign(values) * np.log1p(np.abs(values))
        matrix = np.nan_to_num(squashed, nan=0.0, posinf=np.inf, neginf=-np.inf)
        scale = np.array([self._scale(d) for d in np.asarray(interval_days, np.float64)])
        targets = [
            (side, np.asarray(counts, dtype=np.float64) * scale)
            for side, counts in (("internal", new_internal), ("external", new_external))
        ]
        if not all_finite(matrix, *(t for _, t in targets)):
            self.n_skipped += 1
            return
        saved = self._save()
        for side, counts in targets:
            learn_matrix(models[f"nnl_{side}"], matrix, cols, counts)
            learn_matrix(models[f"nl_{side}"], matrix, cols, counts > 0)
        if self._undo_if_broken(saved):
            return
        self.n_learned += len(values)

    def predict_many(self, X: pd.DataFrame) -> pd.DataFrame:
        """`predict_one` for each row of a frame (NaN = missing feature)."""
        self._ensure()
        if len(X) == 0:
            return pd.DataFrame(columns=list(self.output_names))
        if self.kind != "linear":
            rows = [{k: v for k, v in r.items() if v == v} for r in X.to_dict("records")]
            return pd.DataFrame([self.predict_one(r) for r in rows], index=X.index)
        out = self.predict_array(X.to_numpy(np.float64), list(X.columns))
        return pd.DataFrame(out, index=X.index)[list(self.output_names)]

    def predict_array(self, values: np.ndarray, cols: list[str]) -> dict[str, np.ndarray]:
        """`predict_many` on a plain array (NaN = missing), without building frames: the
        pipeline's hot path for the linear kind."""
        if self.kind != "linear":
            frame = pd.DataFrame(values, columns=cols)
            pred = self.predict_many(frame)
            return {name: pred[name].to_numpy(np.float64) for name in self.output_names}
        models = self._ensure()
        squashed = np.sign(values) * np.log1p(np.abs(values))
        values = np.nan_to_num(squashed, nan=0.0)
        out = {}
        for side in SIDES:
            raw = dot_many(models[f"nnl_{side}"], values, cols)
            out[side] = np.exp(np.clip(raw, -30.0, _MAX_LOG))
            p_true = 1.0 / (1.0 + np.exp(-np.clip(dot_many(models[f"nl_{side}"], values, cols),
                                                   -500.0, 500.0)))  # fmt: skip
            out[f"p_{side}"] = p_true
            out[f"lcr_{side}"] = p_true
        return out

    output_names = ("internal", "p_internal", "lcr_internal", "external", "p_external",
                    "lcr_external")  # fmt: skip

    # -- persistence -------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_versions": library_versions()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        versions = state.pop("_versions", {})
        running = library_versions()
        for lib in ("river", "numpy"):
            if _minor(versions.get(lib, "?")) != _minor(running[lib]):
                raise IncompatibleLearner(
                    f"learner pickled with {lib} {versions.get(lib)}, running {running[lib]}: "
                    "start a fresh learner (or pin the versions it was made with)"
                )
        self.__dict__.update(state)

    # -- state as data (no pickle) ----------------------------------------------------------

    def to_data(self) -> dict[str, Any]:
        """Parameters, counts and, for the linear kind, every River model's weights, intercept
        and Adam state: what a restored learner needs to go on exactly as this one would.
        Tree kinds (``hoeffding``, ``arf``) hold node objects and cannot be stored as data."""
        params = {
            "kind": self.kind,
            "learning_rate": self.learning_rate,
            "l2": self.l2,
            "reference_days": self.reference_days,
            "n_models": self.n_models,
            "seed": self.seed,
        }
        out: dict[str, Any] = {
            "params": params,
            "n_learned": self.n_learned,
            "n_skipped": self.n_skipped,
            "models": None,
        }
        if self._models is None:
            return out
        if self.kind != "linear":
            raise TypeError(f"a {self.kind!r} learner cannot be stored as data (linear only)")
        out["models"] = {name: glm_state(model) for name, model in self._models.items()}
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> LinkLearner:
        """The learner `to_data` described (``ValueError`` naming what is wrong otherwise)."""
        try:
            params = dict(data["params"])
            if params.get("kind") not in KINDS:
                raise ValueError(f"unknown learner kind {params.get('kind')!r}")
            learner = cls(
                kind=str(params["kind"]),
                learning_rate=float(params["learning_rate"]),
                l2=float(params["l2"]),
                reference_days=float(params["reference_days"]),
                n_models=int(params["n_models"]),
                seed=int(params["seed"]),
            )
            learner.n_learned = int(data["n_learned"])
            learner.n_skipped = int(data.get("n_skipped", 0))
            models = data["models"]
            if models is not None:
                built = learner._ensure()
                if set(models) != set(built) or learner.kind != "linear":
                    raise ValueError(f"learner models {sorted(models)} for kind {learner.kind}")
                for name, model in built.items():
                    set_glm_state(model, models[name])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"learner state: missing or bad field {exc}") from None
        return learner

    # -- internals ---------------------------------------------------------------------------

    def _ensure(self) -> dict[str, Any]:
        if self._models is None:
            self._models = {
                f"{task}_{side}": self._make(task) for task in ("nnl", "nl") for side in SIDES
            }
        return self._models

    def _make(self, task: str) -> Any:
        if self.kind == "linear":
            if task == "nnl":
                # Adam: one step per mini-batch needs per-weight step sizes (measured on a
                # 20k-page crawl: yield@10% 0.72 against 0.46 with plain SGD).
                return linear_model.LinearRegression(
                    optimizer=optim.Adam(self.learning_rate),
                    loss=optim.losses.Poisson(),
                    l2=self.l2,
                    intercept_lr=self.learning_rate,
                    clip_gradient=10.0,
                )
            return linear_model.LogisticRegression(
                optimizer=optim.Adam(self.learning_rate),
                l2=self.l2,
                intercept_lr=self.learning_rate,
                clip_gradient=10.0,
            )
        if self.kind == "hoeffding":
            if task == "nnl":
                return tree.HoeffdingTreeRegressor(grace_period=200)
            return tree.HoeffdingTreeClassifier(grace_period=200)
        if self.kind == "arf":
            if task == "nnl":
                return forest.ARFRegressor(n_models=self.n_models, seed=self.seed)
            return forest.ARFClassifier(n_models=self.n_models, seed=self.seed)
        raise ValueError(f"unknown learner kind {self.kind!r}; choose one of {KINDS}")

    def _save(self) -> dict[str, tuple[Any, ...]] | None:
        """What a step changes in the linear models, copied before it (trees are left alone:
        a tree's split thresholds cannot overflow the way a gradient step can)."""
        if self.kind != "linear" or self._models is None:
            return None
        return {name: glm_snapshot(model) for name, model in self._models.items()}

    def _undo_if_broken(self, saved: dict[str, tuple[Any, ...]] | None) -> bool:
        """Put the models' ``saved`` state back if the step left one non-finite; True if so."""
        models = self._models or {}
        if saved is None or all(finite_model(m) for m in models.values()):
            return False
        for name, snapshot in saved.items():
            restore_glm(models[name], snapshot)
        self.n_skipped += 1
        return True

    def _count_one(self, model: Any, xs: dict[str, float]) -> float:
        if self.kind == "linear":
            return math.exp(min(max(dot_one(model, xs), -30.0), _MAX_LOG))
        return max(float(model.predict_one(xs)), 0.0)

    def _scale(self, days: float | None) -> float:
        if days is None or not days > 0 or not math.isfinite(days):
            return 1.0
        return self.reference_days / days

    @staticmethod
    def _prepare_one(x: Features) -> dict[str, float]:
        return {k: squash(v) for k, v in x.items() if v == v and v is not None}

    @staticmethod
    def _prepare_many(X: pd.DataFrame) -> pd.DataFrame:
        values = X.to_numpy(np.float64)
        squashed = np.sign(values) * np.log1p(np.abs(values))
        return pd.DataFrame(np.nan_to_num(squashed, nan=0.0), columns=X.columns, index=X.index)


@dataclass
class Label:
    """A page's next-fetch outcome: the label of the features it had at its previous fetch."""

    new_internal: int
    new_external: int
    interval_days: float
    content_changed: bool = False


class StreamLearner:
    """A `LinkLearner` fed in fixed-size mini-batches, so the stream's cuts do not matter.

    Labels wait in a buffer; every ``learn_every``-th label triggers one ``learn_many`` on the
    buffer. An event is scored by the model as it stands after the labels that arrived before
    or with it were buffered (and learned, if a boundary was reached). The buffer is part of the
    pickled state.

    >>> s = StreamLearner(["a"], learn_every=2)
    >>> X = np.array([[1.0], [2.0], [3.0]])
    >>> labels = [None, Label(1, 0, 7.0), Label(0, 0, 7.0)]
    >>> out = s.score_and_learn(X, [None, X[0], X[1]], labels)
    >>> s.learner.n_learned, len(s.buffer_x)
    (2, 0)
    >>> out["n_learned"].tolist()  # the third row is scored after the boundary
    [0.0, 0.0, 2.0]
    """

    def __init__(
        self,
        feature_names: Sequence[str],
        learner: LinkLearner | None = None,
        learn_every: int = 64,
    ) -> None:
        self.feature_names = list(feature_names)
        self.learner = learner or LinkLearner()
        self.learn_every = learn_every
        self.buffer_x: list[np.ndarray] = []
        self.buffer_y: list[Label] = []

    def score_and_learn(
        self,
        X: np.ndarray,
        previous: Sequence[np.ndarray | None],
        labels: Sequence[Label | None],
    ) -> dict[str, np.ndarray]:
        """Scores for rows ``X`` (in stream order) while learning ``labels[i]`` on
        ``previous[i]`` (the page's row at its previous fetch) just before row i is scored."""
        n = len(X)
        out = {name: np.zeros(n) for name in (*LinkLearner.output_names, "n_learned")}
        start = 0
        for i in range(n):
            label, prev = labels[i], previous[i]
            if label is None or prev is None:
                continue
            self.buffer_x.append(np.asarray(prev, np.float32))
            self.buffer_y.append(label)
            if len(self.buffer_x) >= self.learn_every:
                self._predict_into(out, X, start, i)  # rows before i: the model before it
                start = i
                self._learn()
        self._predict_into(out, X, start, n)
        return out

    @property
    def n_learned(self) -> int:
        return self.learner.n_learned

    def _predict_into(self, out: dict[str, np.ndarray], X: np.ndarray, lo: int, hi: int) -> None:
        if hi <= lo:
            return
        out["n_learned"][lo:hi] = self.learner.n_learned
        values = X[lo:hi].astype(np.float32).astype(np.float64)
        pred = self.learner.predict_array(values, self.feature_names)
        for name in LinkLearner.output_names:
            out[name][lo:hi] = pred[name]

    def _learn(self) -> None:
        labels = self.buffer_y
        self.learner.learn_array(
            np.stack(self.buffer_x).astype(np.float64),
            self.feature_names,
            np.array([y.new_internal for y in labels], dtype=np.float64),
            np.array([y.new_external for y in labels], dtype=np.float64),
            np.array([y.interval_days for y in labels], dtype=np.float64),
        )
        self.buffer_x.clear()
        self.buffer_y.clear()
