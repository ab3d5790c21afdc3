"""Fit a batch link model on a replay run, score it on held-out crawls, register it.

`train_and_register`: split the run's labelled rows by time (`batch.datasets.split_by_time`),
fit on the earlier rows, score on the held-out crawls (yield@budget, P@k% AUC, Spearman, NL F1
and balanced accuracy per side, log-likelihood, with the NNL-Av / NNL-Pr baselines on the same
rows for comparison), then (``refit``) fit again on every labelled row, and register the model
with its held-out scores and a summary of its training data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from batch.datasets import DEFAULT_FEATURE_SET, TrainingSet, split_by_time, training_set
from batch.evaluate import Prediction, evaluate_arrays, load_rows, ranking_predictions
from batch.metrics import classification
from batch.models import DEFAULT_KIND, LinkModel
from batch.registry import Artifact, ModelRegistry

__all__ = ["TrainResult", "held_out_scores", "model_prediction", "train_and_register"]

BASELINES = ("nnl-av", "nnl-pr", "lbla")


def model_prediction(model: LinkModel, X: np.ndarray) -> Prediction:
    """A model's predictions in the evaluator's form (score = expected total new outlinks)."""
    p = model.predict(X)
    return Prediction(p.total, p.p_any, p.internal, p.external)


def held_out_scores(
    model: LinkModel, test: TrainingSet, rows: pd.DataFrame | None = None
) -> dict[str, Any]:
    """Scores of ``model`` on held-out rows; ``rows`` (the same rows' features table) adds the
    baselines' yield for comparison."""
    preds = {"model": model_prediction(model, test.X)}
    if rows is not None:
        preds.update(ranking_predictions(rows, BASELINES))
        preds.pop("random", None)
    records = evaluate_arrays({"nnl_total": test.y["nnl_total"]}, preds, oracle=False)
    out: dict[str, Any] = {"rows": len(test), "pages": int(test.rows["page_id"].nunique())}
    for rec in records:
        prefix = "" if rec["ranking"] == "model" else f"{rec['ranking']}_"
        keys = ("yield_share_10", "yield_relative_10", "p_auc", "spearman")
        if not prefix:
            keys += ("yield_share_5", "yield_share_20", "r2", "mae")
        for key in keys:
            out[prefix + key] = rec.get(key)
    nl = model.nl_scores(test.X)
    for s, side in enumerate(("internal", "external")):
        m = classification(nl[:, s], test.counts[:, s])
        out[f"nl_{side}_f1"] = m["f1"]
        out[f"nl_{side}_balanced_accuracy"] = m["balanced_accuracy"]
    for side, v in model.log_likelihood(test.X, test.counts).items():
        out[f"loglik_{side}"] = v
    return out


@dataclass(frozen=True)
class TrainResult:
    artifact: Artifact
    scores: dict[str, Any]
    training: dict[str, Any]


@contextmanager
def _quiet_step(_text: str) -> Iterator[None]:
    yield


def train_and_register(
    run_dir: Path | str,
    registry: ModelRegistry,
    *,
    kind: str = DEFAULT_KIND,
    feature_set: str = DEFAULT_FEATURE_SET,
    max_rows: int | None = None,
    holdout_crawls: int = 1,
    refit: bool = True,
    name: str = "link",
    model_params: dict[str, Any] | None = None,
    step: Callable[[str], Any] = _quiet_step,
) -> TrainResult:
    """Fit, score on held-out crawls, refit on all rows (optional), register.

    ``step(text)`` is a context manager around each stage (the CLI shows progress with it).
    ``holdout_crawls=0`` skips the held-out scoring and fits once on every labelled row.
    """
    params = {"kind": kind, "feature_set": feature_set, "max_rows": max_rows}
    params |= model_params or {}
    with step("loading feature rows"):
        df = load_rows(run_dir)
    scores: dict[str, Any] = {}
    if holdout_crawls > 0:
        with step("splitting by time"):
            train_rows, test_rows = split_by_time(df, holdout_crawls)
            train, test = (
                training_set(train_rows, feature_set),
                training_set(test_rows, feature_set),
            )
        with step(f"fitting {kind} on {len(train):,} rows (held-out check)"):
            model = LinkModel(**params).fit(train)
        with step(f"scoring {len(test):,} held-out rows"):
            scores = held_out_scores(model, test, test_rows)
            scores["holdout_crawls"] = holdout_crawls
            scores["trained_on_rows"] = len(train)
    if refit or holdout_crawls <= 0:
        with step("building the full training set"):
            train = training_set(df, feature_set)
        with step(f"fitting {kind} on all {len(train):,} labelled rows"):
            model = LinkModel(**params).fit(train)
    training = train.summary() | {
        "run_dir": str(Path(run_dir).resolve()),
        "rows_fitted": int(model.n_rows_),
        "params": {k: v for k, v in model.get_params().items()},
    }
    with step("registering"):
        artifact = registry.register(model, name=name, training=training, scores=scores)
    return TrainResult(artifact, scores, training)
