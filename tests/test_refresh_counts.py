"""`online.refresh.BatchRefresher`'s schedule counts every label it is handed, also those of a
hand-off larger than the rows it keeps."""

from __future__ import annotations

import numpy as np

from online.refresh import BatchRefresher, RefreshPolicy


class _Mean:
    def __init__(self, rate: np.ndarray) -> None:
        self.rate = rate

    def predict_rates(self, X: np.ndarray) -> np.ndarray:
        return np.tile(self.rate, (len(X), 1))


def _fit(X: np.ndarray, names: object, counts: np.ndarray, days: np.ndarray) -> _Mean:
    return _Mean(counts.sum(0) / days.sum())


def test_labels_past_the_kept_rows_still_count_towards_the_schedule() -> None:
    refresher = BatchRefresher(_fit, RefreshPolicy(min_labels=8, min_positive=3, max_rows=4))
    counts = np.array([[1, 0]] * 3 + [[0, 0]] * 7, dtype=np.float32)  # positives first
    refresher.add(np.arange(20, dtype=np.float32).reshape(10, 2), counts, np.ones(10))
    assert (refresher.labels_seen, refresher.positives_seen) == (10, 3)
    rows, kept_counts, _ = refresher.training_rows()
    assert rows[:, 0].tolist() == [12, 14, 16, 18] and not kept_counts.any()  # the last 4
    assert refresher.due()  # 10 labels with 3 positives: the schedule's, not the kept rows'
