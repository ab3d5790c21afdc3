"""How a fitted link model does on held-out rows, beyond its ranking: calibration by decile of
the predicted mean, and which features its held-out log-likelihood rests on.

Used by the experiments (`batch.experiment`); kept apart from the model (`batch.models`),
which they only call.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from batch.models import LinkModel


def calibration_table(mean: np.ndarray, p0: np.ndarray, y: np.ndarray, bins: int = 10):
    """Deciles of the predicted mean: predicted vs observed mean, predicted vs observed P(y=0).

    >>> t = calibration_table(np.arange(20.0), np.full(20, 0.5), np.arange(20.0), bins=4)
    >>> t["observed_mean"].tolist() == t["predicted_mean"].tolist()
    True
    """
    mean = np.asarray(mean, np.float64)
    order = np.argsort(mean, kind="stable")
    groups = np.array_split(order, bins)
    rows = []
    for i, g in enumerate(groups):
        if len(g) == 0:
            continue
        rows.append(
            {
                "decile": i + 1,
                "n": len(g),
                "predicted_mean": float(mean[g].mean()),
                "observed_mean": float(y[g].mean()),
                "predicted_p0": float(p0[g].mean()),
                "observed_p0": float((y[g] == 0).mean()),
            }
        )
    return pd.DataFrame(rows)


def permutation_importances(
    model: LinkModel,
    X: np.ndarray,
    Y: np.ndarray,
    *,
    n_repeats: int = 3,
    max_rows: int = 20_000,
    random_state: int = 0,
) -> pd.DataFrame:
    """Permutation importance (sklearn.inspection) of each feature for the model's held-out
    log-likelihood (both sides summed): the drop when the feature's column is shuffled."""
    from sklearn.inspection import permutation_importance

    X = np.asarray(X, np.float64)
    Y = np.asarray(Y, np.float64)
    if len(X) > max_rows:
        pick = np.random.default_rng(random_state).choice(len(X), max_rows, replace=False)
        X, Y = X[pick], Y[pick]

    def score(est: LinkModel, Xs: np.ndarray, Ys: np.ndarray) -> float:
        return float(sum(est.log_likelihood(Xs, Ys).values()))

    result = permutation_importance(
        model, X, Y, scoring=score, n_repeats=n_repeats, random_state=random_state, n_jobs=1
    )
    table = pd.DataFrame(
        {
            "feature": model.feature_names_,
            "importance": result.importances_mean,
            "std": result.importances_std,
        }
    )
    return table.sort_values("importance", ascending=False, ignore_index=True)
