"""The model the stream refreshes itself (`online.refresh.BatchRefresher`'s trainer).

A lean ExtraTrees (the paper's best model; on the sparse real site S it ranks best of the
batch kinds when refitted as the stream goes on) on the labelled rows the scorer gathered:
counts are scaled to the rows' median interval, so a page fetched after twice the usual
interval does not teach twice the rate; the model then gives rates per day. Few trees and no
classifiers: it is refitted a dozen times in a long replay, beside the pipeline.

>>> rng = np.random.default_rng(0)
>>> X = rng.random((300, 3)).astype(np.float32)
>>> counts = rng.poisson(np.column_stack([6 * X[:, 0], X[:, 1]]))
>>> model = fit_rate_model(X, ["a", "b", "c"], counts, np.full(300, 2.0))
>>> rates = model.predict_rates(X[:2])
>>> rates.shape, bool((rates >= 0).all()), model.interval_days_
((2, 2), True, 2.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from batch.models import LinkModel

#: The refreshed model's settings: 15 trees of leaves of at least 10 rows, 30% of the features
#: per split, one thread (it runs beside the pipeline).
REFRESH_MODEL = {
    "n_estimators": 15,
    "min_samples_leaf": 10,
    "max_features": 0.3,
    "classifiers": False,
    "n_jobs": 1,
}


@dataclass
class RefreshedModel:
    """A `LinkModel` fitted by a refresh, giving rates per day in the pipeline's columns."""

    model: LinkModel
    kind = "extratrees-refresh"

    @property
    def versions_(self) -> dict[str, str]:
        return self.model.versions_

    @property
    def interval_days_(self) -> float:
        return self.model.interval_days_

    @property
    def feature_names_(self) -> list[str]:
        return self.model.feature_names_

    def predict_rates(self, X: np.ndarray) -> np.ndarray:
        return self.model.expected(X) / self.model.interval_days_

    def predict(self, X: np.ndarray):  # type: ignore[no-untyped-def]
        """The `LinkModel` interface, for the registry's readers."""
        return self.model.predict(X)


def fit_rate_model(
    X: np.ndarray, names: Sequence[str], counts: np.ndarray, days: np.ndarray
) -> RefreshedModel:
    """Fit the refresh model on labelled rows (``counts`` (m, 2) over ``days`` (m,))."""
    days = np.asarray(days, dtype=np.float64)
    ok = np.isfinite(days) & (days > 0)
    median = float(np.median(days[ok])) if ok.any() else 1.0
    scaled = np.asarray(counts, dtype=np.float64) * (median / np.where(ok, days, median))[:, None]
    model = LinkModel("extratrees", **REFRESH_MODEL)  # type: ignore[arg-type]
    model.fit(np.asarray(X, dtype=np.float64), scaled, feature_names=list(names),
              interval_days=median)  # fmt: skip
    return RefreshedModel(model)
