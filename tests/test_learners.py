"""One contract suite over every online learner kind (River's checks, adapted), plus the
stream learner's batching guarantee."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pandas as pd
import pytest

from online.learners import KINDS, IncompatibleLearner, Label, LinkLearner, StreamLearner


def stream(n: int = 400, seed: int = 0) -> list[tuple[dict, dict]]:
    """Pages whose last interval's links predict the next; some features come and go."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        rate = float(rng.choice([0.0, 0.5, 6.0]))
        x = {"dp_new_internal_1": float(rng.poisson(rate)), "sp_depth": float(rng.integers(1, 5))}
        if i % 3 == 0:
            x["dn_related_rate"] = rate / 7 + 0.01 * float(rng.normal())
        if i > n // 2:  # a feature that appears mid-stream
            x["sp_late"] = 1.0
        y = {"new_internal": int(rng.poisson(rate)), "new_external": int(rng.poisson(rate / 6))}
        out.append((x, y))
    return out


def learners() -> list[LinkLearner]:
    return [LinkLearner(kind=k, n_models=2, seed=3) for k in KINDS]


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


def fitted(kind: str, data: list[tuple[dict, dict]]) -> LinkLearner:
    learner = LinkLearner(kind=kind, n_models=2, seed=3)
    for x, y in data:
        learner.learn_one(x, y)
    return learner


def test_inputs_are_not_mutated(kind) -> None:
    learner = LinkLearner(kind=kind, n_models=2)
    for x, y in stream(50):
        before_x, before_y = copy.deepcopy(x), copy.deepcopy(y)
        learner.learn_one(x, y)
        learner.predict_one(x)
        assert (x, y) == (before_x, before_y)


def test_pickles_before_and_after_learning(kind) -> None:
    data = stream(120)
    fresh = LinkLearner(kind=kind, n_models=2, seed=3)
    restored = pickle.loads(pickle.dumps(fresh))
    for x, y in data:
        fresh.learn_one(x, y)
        restored.learn_one(x, y)
    again = pickle.loads(pickle.dumps(fresh))
    probe = data[-1][0]
    assert again.predict_one(probe) == fresh.predict_one(probe) == restored.predict_one(probe)


def test_dict_order_has_no_effect(kind) -> None:
    data = stream(150)
    reordered = [(dict(reversed(list(x.items()))), y) for x, y in data]
    a, b = fitted(kind, data), fitted(kind, reordered)
    probe = data[-1][0]
    assert a.predict_one(probe) == pytest.approx(b.predict_one(probe))


def test_same_seed_same_result(kind) -> None:
    data = stream(150)
    probe = data[7][0]
    assert fitted(kind, data).predict_one(probe) == fitted(kind, data).predict_one(probe)


def test_emerging_and_vanishing_features(kind) -> None:
    learner = fitted(kind, stream(200))
    out = learner.predict_one({"never_seen": 3.0})  # only unknown features
    assert set(out) == set(LinkLearner.output_names)
    assert all(np.isfinite(v) for v in out.values())
    assert 0 <= out["p_internal"] <= 1 and out["internal"] >= 0


def test_learns_the_link_signal(kind) -> None:
    learner = fitted(kind, stream(1500) * 2)
    busy = learner.predict_one({"dp_new_internal_1": 6.0, "sp_depth": 2.0})
    calm = learner.predict_one({"dp_new_internal_1": 0.0, "sp_depth": 2.0})
    assert busy["internal"] > calm["internal"] and busy["p_internal"] > calm["p_internal"]


def test_learn_many_equals_predict_one_on_frames() -> None:
    data = stream(256)
    learner = LinkLearner()
    X = pd.DataFrame([x for x, _ in data])
    Y = pd.DataFrame([y for _, y in data])
    learner.learn_many(X, Y)
    many = learner.predict_many(X.iloc[:20])
    for i in range(20):
        one = learner.predict_one(data[i][0])
        assert many.iloc[i].to_dict() == pytest.approx(one)


def test_counts_are_scaled_to_the_reference_interval() -> None:
    a, b = LinkLearner(), LinkLearner()
    for _ in range(400):
        a.learn_one({"f": 1.0}, {"new_internal": 4, "new_external": 0, "interval_days": 14.0})
        b.learn_one({"f": 1.0}, {"new_internal": 2, "new_external": 0, "interval_days": 7.0})
    assert a.predict_one({"f": 1.0})["internal"] == pytest.approx(
        b.predict_one({"f": 1.0})["internal"]
    )


def test_refuses_a_pickle_from_other_library_versions() -> None:
    learner = fitted("linear", stream(50))
    state = learner.__getstate__()
    state["_versions"] = {**state["_versions"], "river": "0.1.0"}
    clone = LinkLearner.__new__(LinkLearner)
    with pytest.raises(IncompatibleLearner, match=r"river 0\.1\.0"):
        clone.__setstate__(state)


def test_stream_learner_does_not_depend_on_how_the_stream_is_cut() -> None:
    rng = np.random.default_rng(5)
    X = rng.poisson(2.0, size=(300, 3)).astype(float)
    previous = [None] + [X[i - 1] for i in range(1, 300)]
    labels = [None] + [Label(int(rng.poisson(2)), 0, 7.0) for _ in range(299)]

    def run(cut: int) -> np.ndarray:
        s = StreamLearner(["a", "b", "c"], learn_every=16)
        parts = [
            s.score_and_learn(X[i : i + cut], previous[i : i + cut], labels[i : i + cut])
            for i in range(0, 300, cut)
        ]
        return np.concatenate([p["internal"] for p in parts])

    whole = run(300)
    for cut in (1, 7, 64):
        assert np.array_equal(run(cut), whole)


@pytest.mark.parametrize("kind", KINDS)
def test_learn_array_equals_learn_many(kind) -> None:
    """The pipeline's array path (River's step called on numpy) leaves every model exactly
    where River's own frame-based learn_many does: same weights, same predictions."""
    rng = np.random.default_rng(3)
    cols = ["a", "b", "c", "d"]
    by_frames, by_arrays = LinkLearner(kind=kind, seed=2), LinkLearner(kind=kind, seed=2)
    for _ in range(6):
        values = rng.poisson(2.0, size=(32, len(cols))).astype(np.float64)
        values[rng.random(values.shape) < 0.2] = np.nan  # missing features
        internal = rng.poisson(3.0, 32).astype(np.float64)
        external = rng.poisson(0.5, 32).astype(np.float64)
        days = rng.choice([3.5, 7.0, 14.0, np.nan], 32)
        labels = {"new_internal": internal, "new_external": external, "interval_days": days}
        by_frames.learn_many(pd.DataFrame(values, columns=cols), pd.DataFrame(labels))
        by_arrays.learn_array(values, cols, internal, external, days)
    assert by_arrays.n_learned == by_frames.n_learned == 192
    probe = rng.poisson(2.0, size=(20, len(cols))).astype(np.float64)
    got = by_arrays.predict_array(probe, cols)
    want = by_frames.predict_array(probe, cols)
    for name in LinkLearner.output_names:
        assert np.array_equal(got[name], want[name]), name
    if kind == "linear":
        for key, model in by_frames._models.items():
            assert dict(by_arrays._models[key]._weights) == dict(model._weights), key
            assert by_arrays._models[key].intercept == model.intercept, key


def test_hedge_learns_where_the_mix_loss_underflows() -> None:
    """A large learning rate and all the weight on an expert far from this round's best
    loss: the mixture's loss underflows in the direct sum ("math domain error", which a live
    worker's 100,000-page bench logged at every epoch); taken in logs it is finite."""
    from online.hedge import AdaHedge

    hedge = AdaHedge.from_state({"k": 2, "cumulative": [0.0, 100.0], "gap": 1e-3, "rounds": 9})
    assert hedge.eta > 600 and hedge.weights().tolist() == [1.0, 0.0]
    hedge.learn(np.array([[2.0, 0.0]]))  # exp(-eta * 2) underflows to 0
    # the mixture lost what its one weighted expert lost: no gap added, the weights unchanged
    assert hedge.gap == pytest.approx(1e-3) and hedge.rounds == 10
    assert hedge.cumulative.tolist() == [2.0, 100.0] and hedge.weights().tolist() == [1.0, 0.0]
