from __future__ import annotations

import pytest

from online.scorers import SCORERS, get_scorer
from online.scoring import LBLAScorer


def lags(side: str, counts: list[float], days: float = 7.0) -> dict[str, float]:
    out = {}
    for lag, c in enumerate(counts, start=1):
        out[f"dp_new_{side}_{lag}"] = c
        out[f"dp_interval_days_{lag}"] = days
    return out


def test_unknown_scorer_named_in_error() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        get_scorer("nope")


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_every_scorer_handles_empty_features(name: str) -> None:
    s = get_scorer(name).score_one({})
    assert s.score == 0 and 0 <= s.p_new <= 1


def test_baselines() -> None:
    f = {
        "dp_new_internal_1": 2.0,
        "dp_new_external_1": 1.0,
        "dp_new_internal_mean": 0.5,
        "dp_new_external_mean": 0.25,
        "dp_ccr": 0.75,
    }
    assert get_scorer("nnl-pr").score_one(f).score == 3.0
    assert get_scorer("nnl-av").score_one(f).score == 0.75
    ccr = get_scorer("ccr").score_one(f)
    assert ccr.score == 0.75 and ccr.expected_new_internal is None


def test_lbla_recent_history_counts_more() -> None:
    s = LBLAScorer()
    recent = s.score_one(lags("internal", [4, 0, 0, 0]))
    old = s.score_one(lags("internal", [0, 0, 0, 4]))
    assert recent.score > old.score > 0


def test_lbla_prior_from_related_pages_fades_with_history() -> None:
    s = LBLAScorer()
    related = {"dn_related_rate_internal_per_day": 2.0, "dn_related_lcr_internal": 1.0}
    newcomer = s.score_one(related)
    assert newcomer.expected_new_internal == pytest.approx(14.0)
    assert newcomer.p_new == pytest.approx(1.0)
    quiet_long = s.score_one({**related, **lags("internal", [0] * 8)})
    quiet_short = s.score_one({**related, **lags("internal", [0])})
    assert quiet_long.score < quiet_short.score < newcomer.score


def test_lbla_probabilities_are_probabilities() -> None:
    s = LBLAScorer()
    for counts in ([0], [5, 5, 5], [0, 1, 0, 2]):
        out = s.score_one({**lags("internal", counts), **lags("external", counts)})
        assert 0 <= out.p_new <= 1
        assert out.score == pytest.approx(out.expected_new_internal + out.expected_new_external)
