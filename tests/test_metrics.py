"""Ranking metrics: oracle = 1, constant = random in closed form, ties in exact expectation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from batch.metrics import (
    PERCENTS,
    Ranked,
    _expected_overlaps,
    classification,
    negbin_loglik,
    poisson_loglik,
    precision_at_k,
    precision_auc,
    regression,
    spearman,
    top_counts,
    yield_at_budget,
)


def heavy(n: int, seed: int, zeros: float = 0.7) -> np.ndarray:
    """Heavy-tailed counts with about ``zeros`` of them 0, like weekly new outlinks."""
    rng = np.random.default_rng(seed)
    counts = np.floor(rng.pareto(1.2, n) * 3).astype(float) + 1
    return np.where(rng.random(n) < zeros, 0.0, counts)


TRUTHS = {
    "untied": np.random.default_rng(0).permutation(1000).astype(float),
    "heavy_ties": heavy(1000, 1),
}


@pytest.mark.parametrize("name", sorted(TRUTHS))
@pytest.mark.parametrize("transform", [lambda y: y, lambda y: 2 * y + 3, np.log1p])
def test_oracle_scores_one_everywhere(name: str, transform) -> None:
    y = TRUTHS[name]
    if name == "heavy_ties":
        assert 0.6 < np.mean(y == 0) < 0.8
    pred = transform(y)
    assert spearman(pred, y) == pytest.approx(1.0, abs=1e-12)
    pk = precision_at_k(pred, y)
    assert np.all(pk == 1.0)
    assert precision_auc(pred, y) == 1.0
    for r in yield_at_budget(pred, y).values():
        assert r["relative"] == 1.0 and r["share"] == r["best"]


def test_reversed_ranking_is_worst() -> None:
    y = TRUTHS["untied"]
    assert spearman(-y, y) == pytest.approx(-1.0)
    assert precision_at_k(-y, y, [10, 50]).tolist() == [0.0, 0.0]


def test_constant_is_random_in_closed_form_untied() -> None:
    y = TRUTHS["untied"]
    n = len(y)
    c = np.zeros(n)
    K = top_counts(n, PERCENTS / 100)
    assert np.allclose(precision_at_k(c, y), K / n)  # exactly the share K / n
    assert precision_auc(c, y) == pytest.approx(0.5, abs=0.01)
    for b, r in yield_at_budget(c, y, budgets=(0.01, 0.05, 0.1, 0.2)).items():
        assert r["share"] == pytest.approx(b)
    assert spearman(c, y) is None


def test_constant_with_tied_truth_matches_closed_form_and_random() -> None:
    y = TRUTHS["heavy_ties"]
    n = len(y)
    c = np.zeros(n)
    K = top_counts(n, PERCENTS / 100)
    _, oracle = _expected_overlaps(Ranked(y), Ranked(y), K)
    assert np.allclose(precision_at_k(c, y), K**2 / (n * oracle))
    # a random score (no ties) gets the same in expectation
    rng = np.random.default_rng(7)
    mean = np.mean([precision_at_k(rng.random(n), y) for _ in range(200)], axis=0)
    assert np.allclose(mean, precision_at_k(c, y), atol=0.02)
    for b, r in yield_at_budget(c, y).items():
        assert r["share"] == pytest.approx(top_counts(n, [b])[0] / n)


def _mc_overlap(pred: np.ndarray, true: np.ndarray, K: int, rng: np.random.Generator, reps: int):
    """Brute force: break ties at random, independently on each side, and average."""
    n = len(pred)
    hits, oracle = 0.0, 0.0
    for _ in range(reps):
        top_p = np.lexsort((rng.random(n), -pred))[:K]
        top_t = np.lexsort((rng.random(n), -true))[:K]
        top_t2 = np.lexsort((rng.random(n), -true))[:K]
        hits += len(np.intersect1d(top_p, top_t))
        oracle += len(np.intersect1d(top_t, top_t2))
    return hits / reps, oracle / reps


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_precision_matches_monte_carlo_tie_breaks(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    true = rng.integers(0, 4, n).astype(float)
    pred = np.where(rng.random(n) < 0.5, true, rng.integers(0, 3, n)).astype(float)
    ks = np.array([10, 25, 50, 75])
    K = top_counts(n, ks / 100)
    overlap, oracle = _expected_overlaps(Ranked(pred), Ranked(true), K)
    pk = precision_at_k(pred, true, ks)
    for j, k in enumerate(K):
        hits, orc = _mc_overlap(pred, true, int(k), rng, 4000)
        assert hits == pytest.approx(overlap[j], abs=0.1)
        assert orc == pytest.approx(oracle[j], abs=0.1)
        assert hits / orc == pytest.approx(pk[j], abs=0.03)


def test_spearman_matches_scipy() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random(500), rng.random(500)
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b)[0], abs=1e-12)
    ta, tb = rng.integers(0, 5, 500).astype(float), heavy(500, 4)
    assert spearman(ta, tb) == pytest.approx(stats.spearmanr(ta, tb)[0], abs=1e-12)
    assert spearman(np.ones(5), np.arange(5.0)) is None
    assert spearman(np.arange(5.0), np.zeros(5)) is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=60),
    st.lists(st.integers(0, 5), min_size=60, max_size=60),
)
def test_precision_bounds_and_oracle(true: list[int], pred: list[int]) -> None:
    y = np.array(true, float)
    p = np.array(pred[: len(y)], float)
    pk = precision_at_k(p, y)
    assert np.all((pk >= 0) & (pk <= 1)) and np.isfinite(pk).all()
    assert np.all(precision_at_k(y, y) == 1.0)
    assert pk[-1] == 1.0  # the whole set is the top at 100 %


def test_yield_without_links_is_flagged() -> None:
    r = yield_at_budget(np.arange(10.0), np.zeros(10))
    assert all(v["no_new_links"] and v["relative"] is None for v in r.values())


def test_yield_ties_in_expectation() -> None:
    # 2 of 4 pages fit; the top-scored one is certain, the 3 tied share the second slot
    r = yield_at_budget(np.array([2.0, 1, 1, 1]), np.array([0.0, 3, 0, 0]), budgets=(0.5,))
    assert r[0.5]["share"] == pytest.approx(1 / 3)
    assert r[0.5]["best"] == 1.0


def test_classification_and_regression() -> None:
    m = classification(np.array([0.9, 0.8, 0.1]), np.array([0, 0, 0]))
    assert m["recall"] is None and m["balanced_accuracy"] is None and m["f1"] is None
    m = classification(np.array([0.9, 0.1, 0.6, 0.2]), np.array([2, 0, 0, 1]))
    assert m == {"recall": 0.5, "precision": 0.5, "f1": 0.5, "balanced_accuracy": 0.5}
    r = regression(np.array([1.0, 1.0]), np.array([2.0, 2.0]))
    assert r["r2"] is None and r["mae"] == 1.0 and r["medae"] == 1.0


def test_logliks_match_scipy() -> None:
    mu, y = np.array([0.5, 2.0, 7.0]), np.array([0, 3, 1])
    assert poisson_loglik(mu, y) == pytest.approx(stats.poisson.logpmf(y, mu).mean())
    alpha = 0.7
    r = 1 / alpha
    want = stats.nbinom.logpmf(y, r, r / (r + mu)).mean()
    assert negbin_loglik(mu, y, alpha) == pytest.approx(want)
    assert negbin_loglik(mu, y, 0.0) == poisson_loglik(mu, y)
    assert poisson_loglik(np.array([0.0]), np.array([1])) == -np.inf


def test_inputs_are_checked() -> None:
    with pytest.raises(ValueError):
        precision_at_k(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))
    with pytest.raises(ValueError):
        spearman(np.arange(3.0), np.arange(4.0))


def test_classification_without_positives_is_undefined_not_zero() -> None:
    from batch.metrics import classification

    m = classification(np.array([0.9, 0.1, 0.6]), np.array([0, 0, 0]))
    assert m["recall"] is None and m["f1"] is None and m["balanced_accuracy"] is None
    assert m["precision"] == 0.0  # it did flag pages, and none gained a link
