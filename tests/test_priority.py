"""The priority's parts: reasons, the next fetch, and what the learned scorers publish."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from online.learned import BatchScorer, EnsembleScorer, OnlineScorer
from online.priority import REASONS, next_fetch_days, reasons_of

COLUMNS = ["dp_new_internal_1", "dp_new_external_1", "dp_content_changed_1", "dp_interval_days_1"]
COLS = {name: j for j, name in enumerate(COLUMNS)}


def test_reasons_are_ordered_by_strength_and_thresholded() -> None:
    shares = {
        "own_history": np.array([0.7, 0.0, 0.02]),
        "related_pages": np.array([0.3, 0.0, 0.0]),
        "model": np.array([0.0, 0.0, 0.98]),
        "prior": np.array([0.0, 1.0, 0.0]),
    }
    out = reasons_of(shares, bonus=np.array([0.0, 0.0, 1.0]), score=np.array([1.0, 0.2, 2.0]))
    assert out[0] == ["own_history", "related_pages"]
    assert out[1] == ["prior"]
    # the bonus is half the score: exploration and the model share it, own history drops out
    assert out[2] == ["exploration", "model"]
    assert set(REASONS) >= {r for row in out for r in row}


def test_next_fetch_is_when_one_new_link_is_expected_within_bounds() -> None:
    days = next_fetch_days(np.array([1.0, 0.1, 0.0, 50.0]), min_days=0.5, max_days=7.0)
    assert days.tolist() == [1.0, 7.0, 7.0, 0.5]


def test_a_page_s_own_history_speaks_and_its_rate_is_per_day() -> None:
    scorer = EnsembleScorer(exploration=0.0, horizon_days=14.0)
    X = np.array([[7.0, 0.0, 1.0, 7.0], [0.0, 0.0, 0.0, 7.0]])
    s = scorer.score_and_learn(X, COLS, [None, None], [None, None], [0.0, 0.0])
    # NNL-Av before anything is learned: 7 links in a 7-day interval, a link a day
    assert s.rate_per_day.tolist() == pytest.approx([1.0, 0.0])
    assert s.expected_new_internal[0] == pytest.approx(14.0)
    assert s.reasons[0][0] == "own_history"
    assert 0.99 < s.p_new[0] <= 1.0 and s.p_new[1] == 0.0


def test_exploration_bonus_fades_as_history_fills() -> None:
    scorer = EnsembleScorer(exploration=0.5, history=2)
    one = np.array([[4.0, 0.0, 0.0, 7.0]])
    names = [*COLUMNS, "dp_new_internal_2", "dp_new_external_2", "dp_content_changed_2",
             "dp_interval_days_2"]  # fmt: skip
    cols = {n: j for j, n in enumerate(names)}
    full = np.array([[4.0, 0.0, 0.0, 7.0, 4.0, 0.0, 0.0, 7.0]])
    short = scorer.score_matrix(np.c_[one, np.full((1, 4), np.nan)], cols)
    long = scorer.score_matrix(full, cols)
    assert short.expected_new_internal[0] == pytest.approx(long.expected_new_internal[0])
    assert short.score[0] > long.score[0] == pytest.approx(long.expected_new_internal[0])
    assert "exploration" in short.reasons[0] and "exploration" not in long.reasons[0]


class _Model:
    """A registered model's interface: counts per 14-day interval."""

    feature_names_ = ("dp_new_internal_1", "missing_feature")
    interval_days_ = 14.0

    def predict(self, X: np.ndarray) -> SimpleNamespace:
        assert np.isnan(X[:, 1]).all()  # a feature the pipeline lacks arrives as NaN
        counts = 2 * np.nan_to_num(X[:, 0])
        zeros = np.zeros(len(X))
        return SimpleNamespace(internal=counts, external=zeros, p_internal=zeros + 0.9,
                               p_external=zeros, std_total=zeros + 1)  # fmt: skip


def test_batch_scorer_uses_the_registered_model_and_names_its_version() -> None:
    source = {"current": None}
    scorer = BatchScorer(model_source=lambda: source["current"], exploration=0.0)
    X = np.array([[7.0, 0.0, 0.0, 7.0]])
    scorer.learned.feature_names = COLUMNS
    before = scorer.score_matrix(X, COLS)
    assert before.models == {} and before.candidates["batch"][0] != before.candidates["batch"][0]
    source["current"] = SimpleNamespace(version="v7", model=_Model())  # picked up, no restart
    after = scorer.score_matrix(X, COLS)
    assert after.models == {"batch": "v7"}
    assert after.candidates["batch"][0] == pytest.approx(1.0)  # 14 links per 14 days


def test_the_variants_weigh_their_own_candidates() -> None:
    assert OnlineScorer().weights().keys() == {"lbla", "online"}
    assert BatchScorer().weights().keys() == {"lbla", "batch"}
    assert len(EnsembleScorer().weights()) == 7
    assert sum(EnsembleScorer().weights().values()) == pytest.approx(1.0)
