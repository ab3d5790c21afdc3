"""The batch (vectorised) forms of per-page computations equal their one-page definitions."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from online.events import parse_event
from online.features import (
    N_STATS,
    own_feature_matrix,
    own_features,
    related_features,
    related_features_of_versions,
)
from online.history import update
from online.links import link_info
from online.scored import iso as _iso
from online.scored import iso_many as _iso_many
from online.scored import micros_many as _micros_many
from online.scored import next_fetch_iso as _next_fetch_iso
from online.stores import MemoryPageStore, PageWrites
from streams.gcpolicy import REPLAY_THRESHOLDS, frozen_survivors

DAY = 86_400
T0 = 1_767_571_200  # 2026-01-05T00:00:00Z: fetch times the event contract accepts


def _pages(n_pages: int, fetches: int, seed: int) -> list:
    """States of pages with windows of different lengths, failures and content changes."""
    rng = np.random.default_rng(seed)
    states = []
    for p in range(n_pages):
        state, links = None, [f"https://s{p % 3}.org/x{p}"]
        for f in range(int(rng.integers(1, fetches + 1))):
            links = links + [f"https://s{p % 3}.org/n{f}-{i}" for i in range(rng.integers(0, 3))]
            links += [f"https://other.net/{f}-{i}" for i in range(rng.integers(0, 2))]
            event = {
                "url": f"https://www.s{p % 3}.org/{'d/' * (p % 4)}p{p}",
                "fetched_at": T0 + f * 7 * DAY + int(rng.integers(0, DAY)),
                "outlinks": links,
                "status": 500 if rng.random() < 0.1 else 200,
                "content_digest": str(rng.integers(0, 2)),
            }
            if rng.random() < 0.7:
                event["content_size"] = int(rng.integers(1, 10_000))
            state, _ = update(state, parse_event(event))
        states.append(state)
    return states


def test_own_feature_matrix_rows_equal_single_pages() -> None:
    states = _pages(40, 12, seed=1)
    urls = [f"https://www.s{p % 3}.org/{'d/' * (p % 4)}p{p}" for p in range(40)]
    for history in (1, 3, 8):
        matrix = own_feature_matrix(states, urls, history)
        for i, (state, url) in enumerate(zip(states, urls, strict=True)):
            single = own_features(state, link_info(url), history)
            assert np.array_equal(matrix[i], single, equal_nan=True)
        # A row does not depend on the rows around it.
        assert np.array_equal(
            own_feature_matrix(states[::-1], urls[::-1], history), matrix[::-1], equal_nan=True
        )


def test_related_features_of_versions_equals_gathered_stats() -> None:
    rng = np.random.default_rng(3)
    versions = rng.random((50, N_STATS)).astype(np.float32)
    versions[rng.random(versions.shape) < 0.2] = np.nan
    version = rng.integers(-1, 50, size=(9, 6))
    weights = rng.random((9, 6))
    weights[2] = 0.0
    weights /= np.maximum(weights.sum(axis=1, keepdims=True), 1e-12)
    stats = versions[np.maximum(version, 0)]
    stats[version < 0] = np.nan
    expected = related_features(np.where(version >= 0, weights, 0.0), stats)
    got = related_features_of_versions(weights, versions, version)
    assert np.allclose(got, expected, equal_nan=True)
    assert np.isnan(got[2]).all()
    # Rows are batch-independent: each row alone gives the same bits.
    for i in range(len(version)):
        alone = related_features_of_versions(weights[i : i + 1], versions, version[i : i + 1])
        assert np.array_equal(alone[0], got[i], equal_nan=True)


_TIMESTAMPS = st.one_of(
    # every second datetime can hold (years 1 to 9999), and the usual epoch range
    st.floats(min_value=-62_135_596_800, max_value=253_402_300_799 - 31 * 86_400),
    st.floats(min_value=-2e9, max_value=4e9),
    st.integers(min_value=0, max_value=4_000_000_000).map(float),
    st.integers(min_value=0, max_value=4_000_000_000_000).map(lambda ms: ms / 1000),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_TIMESTAMPS, min_size=1, max_size=20),
    st.lists(st.one_of(st.none(), st.floats(min_value=0.25, max_value=30.0)), min_size=20),
)
def test_iso_from_micros_equals_datetime(timestamps: list[float], waits: list) -> None:
    moments = [datetime.fromtimestamp(t, UTC) for t in timestamps]
    micros = _micros_many(timestamps)
    assert _iso_many(micros) == [_iso(m) for m in moments]
    waits = waits[: len(timestamps)]
    expected = [
        None if days is None else _iso(m + timedelta(days=days))
        for m, days in zip(moments, waits, strict=True)
    ]
    assert _next_fetch_iso(micros, waits) == expected


def test_memory_store_stats_lookup_over_growing_batches() -> None:
    rng = np.random.default_rng(5)
    store = MemoryPageStore()
    expected: dict[int, np.ndarray] = {}
    for _ in range(6):
        ids = rng.integers(-(2**62), 2**62, size=40)
        ids = np.concatenate([ids, rng.choice(list(expected), 10)]) if expected else ids
        stats = {int(i): rng.random(N_STATS).astype(np.float32) for i in ids}
        store.write(PageWrites(states={}, stats=stats, neighbours={}))
        expected.update(stats)
        unknown = rng.integers(-(2**62), 2**62, size=15)
        query = np.concatenate([np.array(list(expected)), unknown])
        rng.shuffle(query)
        got = store.get_stats(query)
        for row, pid in zip(got, query.tolist(), strict=True):
            if pid in expected:
                assert np.array_equal(row, expected[pid])
            else:
                assert np.isnan(row).all()
    assert MemoryPageStore().get_stats(np.array([1, 2])).shape == (2, N_STATS)


def test_frozen_survivors_freezes_per_batch_and_hands_back() -> None:
    before, thresholds = gc.get_freeze_count(), gc.get_threshold()
    with frozen_survivors() as settle:
        assert gc.get_threshold() == REPLAY_THRESHOLDS != thresholds  # a batch runs through
        kept = [[i] for i in range(1000)]
        settle()
        assert gc.get_freeze_count() >= before + 1000
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds
    assert len(kept) == 1000


def test_frozen_survivors_settle_collects_a_batchs_cycles() -> None:
    """Young collections are rare within a replay, so ``settle`` must collect the cycles a
    batch left."""

    class Node:
        other: object = None

    with frozen_survivors() as settle:
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        assert gone() is not None  # no collection ran in the "batch"
        settle()
        assert gone() is None


def test_freeze_startup_heap_spares_later_garbage_and_raises_thresholds() -> None:
    """In a fresh interpreter (the policy is process-wide): what exists at start-up is frozen,
    cycles made afterwards are still collected, and young collections come less often."""
    script = """
import gc, weakref
from streams.gcpolicy import WORKER_THRESHOLDS, freeze_startup_heap
startup = [[i] for i in range(5000)]
frozen = freeze_startup_heap()
assert frozen >= 5000, frozen
assert gc.get_threshold() == WORKER_THRESHOLDS != (700, 10, 10)

class Node:
    pass

a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after start-up
gone = weakref.ref(a)
del a, b
gc.collect()
assert gone() is None, "a cycle made after the freeze was not collected"
assert gc.get_freeze_count() == frozen
print("ok", frozen)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")
