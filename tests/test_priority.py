"""The priority: combining estimates, time-aware rates, exploration, reasons, next fetch."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from online.learned import BatchScorer, EnsembleScorer, OnlineScorer
from online.priority import Estimate, combine, next_fetch_days


def est(internal, external=0.0, p=0.5, std=None) -> Estimate:
    n = np.ones(1)
    return Estimate(internal * n, external * n, p * n, 0.0 * n, None if std is None else std * n)


def test_weights_are_normalised_and_rate_is_per_day() -> None:
    s = combine(
        [("a", est(4.0), np.array([1.0])), ("lbla", est(2.0), np.array([3.0]))],
        intervals=np.array([8.0]),
        history=8,
        horizon_days=14.0,
    )
    assert s.expected_new_internal[0] == pytest.approx(2.5)
    assert s.rate_per_day[0] == pytest.approx(2.5 / 14)


def test_exploration_bonus_fades_as_history_fills() -> None:
    scores = [
        combine(
            [("a", est(1.0, std=2.0), np.ones(1))],
            intervals=np.array([float(h)]),
            history=8,
            exploration=0.5,
        ).score[0]
        for h in (0, 4, 8)
    ]
    assert scores == pytest.approx([2.0, 1.5, 1.0])


def test_reasons_follow_what_drove_the_score() -> None:
    newcomer = combine(
        [("lbla", est(1.0), np.ones(1))],
        intervals=np.zeros(1),
        history=8,
        own_share=np.zeros(1),
        related_known=np.ones(1, bool),
    )
    veteran = combine(
        [("online", est(1.0), np.array([0.8])), ("lbla", est(1.0), np.array([0.2]))],
        intervals=np.full(1, 8.0),
        history=8,
        own_share=np.ones(1),
        related_known=np.ones(1, bool),
    )
    assert newcomer.reasons[0][0] == "related_pages"
    assert veteran.reasons[0][:2] == ["model", "own_history"]


def test_next_fetch_is_when_one_new_link_is_expected_within_bounds() -> None:
    days = next_fetch_days(np.array([1.0, 0.1, 0.0, 50.0]), min_days=0.5, max_days=7.0)
    assert days.tolist() == [1.0, 7.0, 7.0, 0.5]


class _Model:
    """A registered model's interface: counts per 14-day interval."""

    feature_names_ = ("dp_new_internal_1", "missing_feature")
    interval_days_ = 14.0

    def predict(self, X: np.ndarray) -> SimpleNamespace:
        assert np.isnan(X[:, 1]).all()  # a feature the pipeline lacks arrives as NaN
        counts = 2 * np.nan_to_num(X[:, 0])
        return SimpleNamespace(
            internal=counts,
            external=np.zeros(len(X)),
            p_internal=np.full(len(X), 0.9),
            p_external=np.zeros(len(X)),
            std_total=np.ones(len(X)),
        )


def test_batch_scorer_uses_the_current_model_and_its_version() -> None:
    artifact = SimpleNamespace(version="v7", model=_Model())
    source = {"current": None}
    scorer = BatchScorer(model_source=lambda: source["current"], exploration=0.0)
    X, cols = np.array([[7.0, 7.0]]), {"dp_new_internal_1": 0, "dp_interval_days_1": 1}
    before = scorer.score_matrix(X, cols)
    assert before.models == {} and "model" not in before.reasons[0]
    source["current"] = artifact  # a refreshed model, no restart
    after = scorer.score_matrix(X, cols)
    assert after.models == {"batch": "v7"} and after.reasons[0][0] == "model"
    # 14 links per 14 days -> 7 per 7-day horizon
    assert after.expected_new_internal[0] == pytest.approx(7.0)


def test_ensemble_and_online_weights() -> None:
    assert OnlineScorer().online_weight == 0.5
    e = EnsembleScorer(model_source=lambda: None)
    assert e.learns and e.uses_batch and e.online_weight + e.batch_weight <= 1.0
