"""Learned state is stored as data, never pickle (issue 15, item 4), against the real Redis.

* a worker's scorer state round-trips through Redis exactly: replay half, save, restore in a
  fresh pipeline, replay the rest == replay all without a restart;
* a pickle planted at the learner key is never unpickled: refused, counted, copied aside, and
  the scorer starts fresh (its ``__reduce__`` does not run).
"""

from __future__ import annotations

import os
import pickle
import uuid
from pathlib import Path

import numpy as np
import pytest

from online import ensemble_state
from online.ensemble_state import EnsembleState
from online.index import FaissIndex
from online.learners import LinkLearner
from online.pipeline import PagePipeline, PipelineConfig
from online.scorers import get_scorer
from online.state_codec import MAGIC, StateRefused, dumps, loads
from streams.redis_store import RedisPageStore
from tests.test_pipeline import DIM, comparable, crawl

redis = pytest.importorskip("redis")


@pytest.fixture
def store(redis_client):
    s = RedisPageStore(redis_client, prefix=f"test:{uuid.uuid4().hex[:12]}:", worker_id="w1")
    yield s
    s.delete_all()


def _pipeline(store, index) -> PagePipeline:
    return PagePipeline(
        store, index, get_scorer("ensemble"), PipelineConfig(embedding_dim=DIM, neighbours=5)
    )


def _feed(pipeline: PagePipeline, events, batch: int = 50) -> list:
    out = []
    for i in range(0, len(events), batch):
        out.extend(pipeline.process(events[i : i + batch]))
    return out


def test_state_round_trips_through_redis_and_scores_as_without_a_restart(store, redis_client):
    events = crawl(pages=120, rounds=6, seed=3)
    half = len(events) // 2
    whole = _pipeline(RedisPageStore(redis_client, prefix=f"{store.prefix}all:"), FaissIndex(DIM))
    try:
        expected = _feed(whole, events)
    finally:
        whole.store.delete_all()
    index = FaissIndex(DIM)
    first = _pipeline(store, index)
    got = _feed(first, events[:half])
    saved = first.scorer.state()
    assert saved.learner is not None and saved.learner.n_learned > 0, "nothing learned to save"
    head = redis_client.get(store.learner_key)
    assert head.startswith(MAGIC)
    # the waiting labels are in blocks of their own, each stored once: those the head names
    named = EnsembleState.block_refs(head)
    assert named and len(saved.pending) > 0
    blocks = {int(k.rsplit(b":", 1)[1]) for k in redis_client.keys(f"{store.learner_key}:b:*")}
    assert blocks == set(named)
    assert store.get_learner().to_bytes() == saved.to_bytes()  # data in, the same data out
    second = _pipeline(store, index)  # a restarted worker: the state comes from Redis
    assert second.counters.learner_refused == 0
    assert second.scorer.state().to_bytes() == saved.to_bytes()
    got += _feed(second, events[half:])
    assert comparable(got) == comparable(expected)


def test_learner_data_round_trip_learns_on_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    X, cols = rng.random((256, 4)), ["a", "b", "c", "d"]
    counts, days = rng.poisson(2.0, 256).astype(float), np.full(256, 7.0)
    a = LinkLearner(reference_days=1.0)
    a.learn_array(X[:128], cols, counts[:128], counts[:128] * 0, days[:128])
    b = LinkLearner.from_data(loads(dumps("l", a.to_data()), "l"))
    for learner in (a, b):
        learner.learn_array(X[128:], cols, counts[128:], counts[128:] * 0, days[128:])
    pa, pb = a.predict_array(X, cols), b.predict_array(X, cols)
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)
    assert a.to_data() == b.to_data()


def _blob(header: bytes, tail: bytes = b"") -> bytes:
    return MAGIC + len(header).to_bytes(4, "little") + header + tail


class _Boom:
    """A pickle payload that, when unpickled, writes a marker file (stands in for any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_at_the_learner_key_does_not_execute(store, redis_client, tmp_path, caplog):
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Boom(marker))
    redis_client.set(store.learner_key, evil)
    with pytest.raises(StateRefused, match="a pickle"):
        store.get_learner()
    with caplog.at_level("ERROR", logger="lookaround.pipeline"):
        pipeline = _pipeline(store, FaissIndex(DIM))  # what a worker does at start
    assert not marker.exists(), "the planted pickle ran"
    assert pipeline.counters.learner_refused == 1
    assert "stored learner state refused, starting a fresh learner" in caplog.text
    assert redis_client.get(f"{store.learner_key}:refused") == evil  # kept for inspection
    _feed(pipeline, crawl(pages=30, rounds=3))  # the fresh state overwrites the key
    assert redis_client.get(store.learner_key).startswith(MAGIC)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"", "not a state blob"),
        (_blob(b"{"), "damaged"),
        (MAGIC + b"\xff\x00\x00\x00{}", "damaged state blob: header of 255 bytes"),
        (_blob(b'{"format": 99, "kind": "ensemble-state", "data": {}}'), "format 99"),
        (_blob(b'{"format": 1, "kind": "other", "data": {}}'), "'other' state"),
        (_blob(b'{"format": 1, "kind": "ensemble-state", "data": {}}'), "bad ensemble-state"),
    ],
)
def test_anything_but_our_data_is_refused(blob, message) -> None:
    with pytest.raises(StateRefused, match=message):
        EnsembleState.from_bytes(blob)


def test_object_arrays_are_refused_both_ways() -> None:
    with pytest.raises(TypeError, match="dtype object"):
        dumps("x", {"a": np.array([object()])})
    with pytest.raises(StateRefused, match="not allowed"):
        loads(_blob(b'{"format":1,"kind":"x","data":{"$nd":["|O8",[1],0]}}', b"\0" * 8), "x")
    with pytest.raises(StateRefused, match="the blob has 8"):
        loads(_blob(b'{"format":1,"kind":"x","data":{"$nd":["<f8",[2],0]}}', b"\0" * 8), "x")
    with pytest.raises(StateRefused, match="damaged array"):
        loads(_blob(b'{"format":1,"kind":"x","data":{"$nd":["<f8",[-1],0]}}', b"\0" * 8), "x")


def test_a_stored_block_damaged_or_inflating_too_far_is_refused(monkeypatch) -> None:
    """The waiting labels' blocks are stored deflated: one that is cut short, not ours, or
    that would inflate past the bound (a zip bomb) is refused, never inflated whole."""
    blob = ensemble_state.pack_block(b"x" * 5000)
    assert len(blob) < 200 and ensemble_state.unpack_block(blob) == b"x" * 5000
    with pytest.raises(StateRefused, match="damaged"):
        ensemble_state.unpack_block(blob[:-5])
    with pytest.raises(StateRefused, match="not a stored block"):
        ensemble_state.unpack_block(b"\x80\x05\x95 a pickle")
    monkeypatch.setattr(ensemble_state, "MAX_BLOCK_BYTES", 1000)
    with pytest.raises(StateRefused, match="over 1000 bytes"):
        ensemble_state.unpack_block(blob)


def _feature_rows(n: int, seed: int = 0) -> np.ndarray:
    """Rows like the pipeline's: counts, rates and half-precision look-around values."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(2.0, size=(n, 20)).astype(np.float32)
    rates = rng.beta(1.0, 5.0, size=(n, 30)).astype(np.float32)
    half = rng.gamma(1.0, 3.0, size=(n, 34)).astype(np.float16).astype(np.float32)
    return np.hstack([counts, rates, half])


def test_waiting_label_blocks_are_stored_byte_shuffled_and_read_back_exactly() -> None:
    """A block's rows and labels are stored grouped by byte position (fewer bytes deflated
    than the arrays as they lie) and read back to the same bits; blocks stored before as
    arrays are still read, and a block whose shape does not fit its bytes is refused."""
    rows = _feature_rows(2000)
    labels = np.column_stack(
        [np.arange(2000) % 3, np.zeros(2000), np.full(2000, 7.0), np.ones(2000), np.arange(2000.0)]
    )
    pending = ensemble_state.PendingLabels()
    pending.add(rows, labels)
    ((seq, blob),) = pending.block_blobs().items()
    back = ensemble_state.PendingLabels.from_blocks([(seq, 0)], {seq: blob}, 1)
    got_rows, got_labels = back.all()
    assert got_rows.tobytes() == rows.tobytes() and got_labels.tobytes() == labels.tobytes()

    as_arrays = {"rows": rows, "labels": labels}
    before = ensemble_state.pack_block(dumps(ensemble_state.PendingLabels.BLOCK_KIND, as_arrays))
    assert len(blob) < 0.9 * len(before)
    old = ensemble_state.PendingLabels.from_blocks([(0, 5)], {0: before}, 1)
    old_rows, old_labels = old.all()
    assert old_rows.tobytes() == rows[5:].tobytes() and old_labels.tobytes() == labels[5:].tobytes()

    data = loads(ensemble_state.unpack_block(blob), ensemble_state.PendingLabels.BLOCK_KIND)
    data["shape"] = [1999, rows.shape[1]]
    damaged = ensemble_state.pack_block(dumps(ensemble_state.PendingLabels.BLOCK_KIND, data))
    with pytest.raises(StateRefused, match="damaged"):
        ensemble_state.PendingLabels.from_blocks([(0, 0)], {0: damaged}, 1)
