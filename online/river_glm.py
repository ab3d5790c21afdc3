"""River's linear models reached below their public API, in one place.

The online learner (`online.learners.LinkLearner`) steps River's GLMs on numpy arrays
directly (River's own ``learn_many`` converts to frames first, which costs more than the
step), scores them row by row (so a row's score does not depend on the other rows of its
batch), stores their state as data (weights, intercept, Adam's moments: no pickle) and checks
that a step left them finite. All of that touches River's private attributes; kept here, a
River release that changes them breaks one module, and `tests/test_learners.py`, which checks
these against River's own methods, says so.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np
from river.utils import VectorDict


def all_finite(*arrays: np.ndarray) -> bool:
    """Whether every value of every array is finite."""
    return all(bool(np.isfinite(a).all()) for a in arrays)


def finite_model(model: Any) -> bool:
    """Whether a River linear model's weights, intercept and optimiser state are all finite."""
    values = [float(model.intercept), *model._weights.values()]
    for state in vars(model.optimizer).values():
        if isinstance(state, Mapping):
            values.extend(state.values())
    return all_finite(np.array(values, dtype=np.float64))


def learn_matrix(model: Any, X: np.ndarray, cols: list[str], y: np.ndarray) -> None:
    """What River's ``GLM.learn_many(frame, series)`` does once it has turned them into numpy
    (river 0.26), called on the numpy directly: the frame conversions cost more than the
    step. `tests/test_learners.py` checks it against ``learn_many`` bit for bit, so a River
    release that changes its internals fails there, not silently."""
    saved = model._enter_learn_mode(set(cols))
    try:
        get_grad = functools.partial(model._eval_gradient_many, X)
        model._fit(x=cols, y=y, w=1, get_grad=get_grad)
    finally:
        model._exit_learn_mode(saved)


def _pairs(values: Any) -> list[list[Any]] | None:
    """A River weight map as ``[keys, values]`` (insertion order kept), None for None."""
    if values is None:
        return None
    items = dict(values)
    return [list(items), [float(v) for v in items.values()]]


def _unpairs(pairs: Any) -> dict[str, float]:
    keys, values = pairs
    if len(keys) != len(values) or not all(isinstance(k, str) for k in keys):
        raise ValueError("learner state: weight names and values do not pair up")
    return {k: float(v) for k, v in zip(keys, values, strict=True)}


def glm_state(model: Any) -> dict[str, Any]:
    """What changes as a River GLM with Adam learns: weights, intercept, Adam's moments."""
    opt = model.optimizer
    return {
        "weights": _pairs(model._weights),
        "intercept": float(model.intercept),
        "n_iterations": int(opt.n_iterations),
        "m": _pairs(opt.m),
        "v": _pairs(opt.v),
    }


def set_glm_state(model: Any, state: Mapping[str, Any]) -> None:
    """Put `glm_state`'s weights, intercept and Adam moments back into ``model``."""
    moments = (None if state[name] is None else _unpairs(state[name]) for name in ("m", "v"))
    weights, intercept = _unpairs(state["weights"]), np.float64(state["intercept"])
    restore_glm(model, (weights, intercept, int(state["n_iterations"]), *moments))


def glm_snapshot(model: Any) -> tuple[Any, ...]:
    """What a step changes in a River GLM with Adam (weights, intercept, Adam's step count
    and moments), copied: a tenth of a deep copy's time, and the learner takes one before
    every mini-batch step (`restore_glm` puts it back)."""
    opt = model.optimizer
    moments = (None if opt.m is None else dict(opt.m), None if opt.v is None else dict(opt.v))
    return dict(model._weights), model.intercept, opt.n_iterations, *moments


def restore_glm(model: Any, snapshot: tuple[Any, ...]) -> None:
    """Put a `glm_snapshot` back into ``model``."""
    weights, model.intercept, n_iterations, m, v = snapshot
    model._weights = VectorDict(weights)
    opt = model.optimizer
    opt.n_iterations = n_iterations
    opt.m = None if m is None else defaultdict(float, m)
    opt.v = None if v is None else defaultdict(float, v)


def dot_one(model: Any, x: Mapping[str, float]) -> float:
    """A linear model's raw score for one feature dict (River's own, below ``predict_one``'s
    link function)."""
    return model._raw_dot_one(x)


def dot_many(model: Any, values: np.ndarray, cols: list[str]) -> np.ndarray:
    """A linear model's raw scores, row by row: an elementwise product summed along each row
    gives the same bits for a row whatever the other rows (a matrix product does not, as BLAS
    picks kernels by shape), so a stream's cuts cannot change a score."""
    weights = np.array([model._weights.get(c, 0.0) for c in cols], dtype=np.float64)
    return (values * weights).sum(axis=1) + float(model.intercept)
