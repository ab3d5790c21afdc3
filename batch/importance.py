"""Which features carry weight on a crawl: permutation importance of the refreshed model.

The model the stream refreshes itself (`batch.refresh.fit_rate_model`) is fitted on a run's
earlier crawls and judged on its last ones; each feature family (a feature and its lags, e.g.
``dp_new_internal_1`` .. ``_8`` together, since a lag alone is redundant with its neighbours)
is then shuffled across the held-out rows, and the rise of the Poisson deviance of the
expected new outlinks is its importance. Deviance rather than yield: on a sparse site the
yield at 10% moves by whole pages and a shuffle rarely changes it, while the deviance sees
every row.

>>> family("dp_new_internal_3"), family("sp_content_size"), family("dn_related_lcr_internal")
('dp_new_internal', 'sp_content_size', 'dn_related_lcr_internal')
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from batch.datasets import split_by_time, training_set
from batch.refresh import fit_rate_model

__all__ = ["family", "permutation_importance", "poisson_deviance"]

_LAG = re.compile(r"_\d+$")


def family(name: str) -> str:
    """A feature's family: its name without the lag suffix."""
    return _LAG.sub("", name)


def poisson_deviance(expected: np.ndarray, observed: np.ndarray) -> float:
    """Mean Poisson deviance of expected counts against observed ones (both sides summed)."""
    mu = np.maximum(np.asarray(expected, dtype=np.float64), 1e-9)
    y = np.asarray(observed, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        term = np.where(y > 0, y * np.log(y / mu), 0.0)
    return float(np.mean(2.0 * (term - (y - mu))))


def permutation_importance(
    rows: pd.DataFrame, *, holdout_crawls: int = 2, repeats: int = 3, seed: int = 0
) -> pd.DataFrame:
    """Per feature family: the held-out deviance's mean rise when the family is shuffled
    (``importance``, larger: more weight), its spread over ``repeats`` shuffles (``std``), and
    that rise relative to the unshuffled deviance (``share``). Sorted by importance; empty
    where the held-out crawls show no new link."""
    train_rows, test_rows = split_by_time(rows, holdout_crawls=holdout_crawls)
    train, test = training_set(train_rows), training_set(test_rows)
    observed = test.counts.sum(axis=1)
    if len(train) == 0 or len(test) == 0 or not (observed > 0).any():
        return pd.DataFrame(columns=["family", "importance", "std", "share"])
    model = fit_rate_model(train.X, train.feature_names, train.counts, train.interval_days)
    days = np.nan_to_num(test.interval_days, nan=model.interval_days_)

    def deviance(X: np.ndarray) -> float:
        return poisson_deviance(model.predict_rates(X).sum(axis=1) * days, observed)

    base = deviance(test.X)
    rng = np.random.default_rng(seed)
    families: dict[str, list[int]] = {}
    for i, name in enumerate(test.feature_names):
        families.setdefault(family(name), []).append(i)
    records = []
    for name, columns in families.items():
        rises = []
        for _ in range(repeats):
            shuffled = test.X.copy()
            shuffled[:, columns] = test.X[rng.permutation(len(test.X))][:, columns]
            rises.append(deviance(shuffled) - base)
        records.append((name, float(np.mean(rises)), float(np.std(rises))))
    table = pd.DataFrame(records, columns=["family", "importance", "std"])
    table["share"] = table["importance"] / max(base, 1e-12)
    return table.sort_values("importance", ascending=False, ignore_index=True)
