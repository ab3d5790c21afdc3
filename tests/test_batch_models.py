"""Batch link models: the scorer-facing interface of every kind, NaN, pickling, count models."""

from __future__ import annotations

import pickle
import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest
from sklearn.base import clone

from batch.model_diagnostics import calibration_table, permutation_importances
from batch.models import KINDS, CountPrediction, LinkModel

NAMES = ["signal", "noise", "sometimes_missing"]
FAST = {"extratrees": {"n_estimators": 10}, "ngboost": {"n_estimators": 20}}


def _data(n: int = 1500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Over-dispersed counts: gamma-mixed Poisson, mostly zeros, driven by column 0."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    X[rng.random(n) < 0.3, 2] = np.nan
    mu = np.column_stack([0.1 + 6 * X[:, 0] ** 2, 0.05 + X[:, 0]])
    lam = mu * rng.gamma(0.4, 1 / 0.4, size=mu.shape)
    return X, rng.poisson(lam).astype(float)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return _data()


@pytest.fixture(scope="module")
def fitted(data) -> dict[str, LinkModel]:
    X, Y = data
    return {
        kind: LinkModel(kind, random_state=0, **FAST.get(kind, {})).fit(
            X, Y, feature_names=NAMES, interval_days=np.full(len(X), 6.5)
        )
        for kind in KINDS
    }


@pytest.mark.parametrize("kind", KINDS)
def test_interface(fitted, data, kind: str) -> None:
    model = fitted[kind]
    X, _ = data
    assert model.kind == kind and model.feature_names_ == NAMES
    assert model.interval_days_ == 6.5
    assert {"sklearn", "ngboost", "numpy", "python"} <= set(model.versions_)
    Xq = X[:50].copy()
    Xq[:10] = np.nan  # a row with nothing known still gets a prediction
    pred = model.predict(Xq)
    assert isinstance(pred, CountPrediction)
    for name in ("internal", "external", "p_internal", "p_external", "std_total"):
        a = getattr(pred, name)
        assert a.dtype == np.float64 and a.shape == (50,) and np.isfinite(a).all(), name
    assert (pred.internal >= 0).all() and (pred.std_total >= 0).all()
    assert ((pred.p_internal >= 0) & (pred.p_internal <= 1)).all()
    assert ((pred.p_any >= pred.p_internal) & (pred.p_any <= 1)).all()
    # the signal column moves predictions the right way
    lo, hi = np.array([[0.05, 0.5, 0.5]]), np.array([[0.95, 0.5, 0.5]])
    assert model.predict(hi).internal[0] > model.predict(lo).internal[0]
    assert model.predict(np.empty((0, 3))).internal.shape == (0,)
    with pytest.raises(ValueError, match="3 columns"):
        model.predict(X[:5, :2])


@pytest.mark.parametrize("kind", KINDS)
def test_pickle_round_trip(fitted, data, kind: str) -> None:
    model = fitted[kind]
    again = pickle.loads(pickle.dumps(model))
    X = data[0][:40]
    a, b = model.predict(X), again.predict(X)
    for name in ("internal", "external", "p_internal", "p_external", "std_total"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-12)


def test_sklearn_conventions(data) -> None:
    model = LinkModel("extratrees", n_estimators=7, min_samples_leaf=3)
    assert model.get_params()["n_estimators"] == 7
    assert not [k for k in vars(model) if k.endswith("_")]  # nothing learned before fit
    twin = clone(model)
    assert twin.get_params() == model.get_params()
    X, Y = data
    assert model.fit(X, Y, feature_names=NAMES) is model
    with pytest.raises(ValueError, match="unknown kind"):
        LinkModel("forest").fit(X, Y, feature_names=NAMES)
    with pytest.raises(ValueError, match="not fitted"):
        LinkModel().predict(X)


def test_same_seed_same_model(data) -> None:
    X, Y = data
    a = LinkModel("extratrees", n_estimators=5, random_state=3).fit(X, Y, feature_names=NAMES)
    b = LinkModel("extratrees", n_estimators=5, random_state=3).fit(X, Y, feature_names=NAMES)
    np.testing.assert_allclose(a.predict(X).internal, b.predict(X).internal, rtol=1e-12)


def test_over_dispersed_models_beat_poisson_on_over_dispersed_counts(fitted) -> None:
    X, Y = _data(1500, seed=1)  # held out
    ll = {k: fitted[k].log_likelihood(X, Y) for k in ("hgb", "negbin", "hurdle")}
    assert fitted["negbin"].alpha_[0] > 0.5  # true NB2 alpha is 1 / 0.4 = 2.5
    for side in ("internal", "external"):
        assert ll["negbin"][side] > ll["hgb"][side]
        assert ll["hurdle"][side] > ll["hgb"][side]
    p0 = fitted["negbin"].p_zero(X)[:, 0]
    assert abs(p0.mean() - (Y[:, 0] == 0).mean()) < 0.05  # calibrated zeros


def test_balanced_scores_threshold_at_the_base_rate(fitted, data) -> None:
    model = fitted["hgb"]
    X, _ = data
    pred, nl = model.predict(X), model.nl_scores(X)
    rate = model.base_rate_[0]
    assert ((nl[:, 0] >= 0.5) == (pred.p_internal >= rate - 1e-12)).mean() > 0.99


def test_extratrees_std_is_the_spread_across_trees(fitted, data) -> None:
    model = fitted["extratrees"]
    X = data[0][:20]
    Xf = model._filled(X)
    per_tree = np.stack([t.predict(Xf).sum(1) for t in model.regressor_.estimators_])
    np.testing.assert_allclose(model.predict(X).std_total, per_tree.std(0))


def test_calibration_and_permutation_importance(fitted) -> None:
    X, Y = _data(800, seed=2)
    model = fitted["hurdle"]
    pred = model.predict(X)
    table = calibration_table(pred.internal, model.p_zero(X)[:, 0], Y[:, 0])
    assert len(table) == 10 and table["n"].sum() == 800
    assert table["observed_mean"].iloc[-1] > table["observed_mean"].iloc[0]
    imp = permutation_importances(model, X, Y, n_repeats=2, max_rows=800)
    assert imp["feature"].iloc[0] == "signal"


def test_fitting_a_model_the_stream_refreshes_does_not_import_ngboost() -> None:
    """The refreshed ExtraTrees records NGBoost's version from its metadata: importing NGBoost
    (and SymPy) in the refresh's thread would hold the GIL for about a second mid-stream."""
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from batch.refresh import fit_rate_model\n"
        "X = np.random.default_rng(0).random((200, 3))\n"
        "model = fit_rate_model(X, ['a', 'b', 'c'], np.ones((200, 2)), np.full(200, 2.0))\n"
        "print(model.versions_['ngboost'], 'ngboost' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert done.stdout.split() == [metadata.version("ngboost"), "False"]
