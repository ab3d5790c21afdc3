"""RedisPageStore against the real Redis (127.0.0.1:6379): round trips, atomic idempotent
writes, TTL, the learner in the same transaction, and parity with the in-memory store."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from online.ensemble_state import EnsembleState
from online.features import N_STATS
from online.hedge import AdaHedge
from online.history import states_equal
from online.related_updates import GroupGain, SiblingFollow
from online.stores import MemoryPageStore, Neighbours, PageWrites
from streams.redis_store import RedisPageStore
from tests.test_pipeline import comparable, crawl, run
from tests.test_related_updates import related_of, site

redis = pytest.importorskip("redis")

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="module")
def client(redis_client):
    return redis_client


@pytest.fixture
def store(client):
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    s = RedisPageStore(client, prefix=prefix, worker_id="w1")
    yield s
    s.delete_all()


def test_round_trip_and_unknown(store):
    events = crawl(pages=10, rounds=2)
    run(events, batch=7, store=store)
    memory_pipeline, _ = run(events, batch=7)
    mem = memory_pipeline.store
    urls = sorted(mem.states)
    got = store.get_states([*urls, "https://nowhere.example/"])
    assert got[-1] is None
    for url, state in zip(urls, got, strict=False):
        assert states_equal(state, mem.states[url])
    pids = np.array(sorted(mem._stats_row), dtype=np.int64)
    assert np.array_equal(store.get_stats(pids), mem.get_stats(pids), equal_nan=True)
    unknown = store.get_stats(np.array([123456789], dtype=np.int64))
    assert unknown.shape == (1, N_STATS) and np.isnan(unknown).all()
    for pid in pids.tolist():
        a, b = store.get_neighbours([pid])[0], mem.get_neighbours([pid])[0]
        assert (a is None) == (b is None)
        if a is not None:
            assert np.array_equal(a.ids, b.ids) and np.array_equal(a.weights, b.weights)
    assert store.get_rows([987654321]) == [None]
    assert store.get_learner() is None


@pytest.mark.parametrize("batch", [1, 13, 1000])
def test_parity_with_memory_store(store, batch):
    events = crawl()
    _, expected = run(events, batch=batch)
    _, got = run(events, batch=batch, store=store)
    assert comparable(got) == comparable(expected)


def snapshot(store: RedisPageStore) -> dict:
    return {key: store.client.get(key) for key in store.keys()}  # noqa: SIM118


def test_stale_and_redelivered_writes_change_nothing(store):
    events = crawl(pages=6, rounds=3)
    run(events, batch=5, store=store)
    urls = sorted({e.url for e in events})
    before = snapshot(store)
    # The first round again: every state in Redis is newer, so the write is skipped whole.
    old = MemoryPageStore()
    run(events[: len(urls)], batch=100, store=old)
    store.write(
        PageWrites(
            states=dict(old.states),
            stats={pid: old.stats(pid) for pid in old._stats_row},
            neighbours=dict(old.neighbours),
        )
    )
    assert snapshot(store) == before
    assert store.skipped >= len(urls)


def test_learner_written_with_pages_and_ttl(client):
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    store = RedisPageStore(client, prefix=prefix, ttl=60, worker_id="w7")
    try:
        events = crawl(pages=3, rounds=1)
        mem = MemoryPageStore()
        run(events, batch=10, store=mem)
        learner = EnsembleState(AdaHedge(2), epochs=3)  # stored as data, not pickle
        store.write(
            PageWrites(
                states=dict(mem.states),
                stats={pid: mem.stats(pid) for pid in mem._stats_row},
                neighbours={1: Neighbours(np.array([2]), np.array([1.0], np.float32), 2)},
                learner=learner,
            )
        )
        assert store.get_learner().to_bytes() == learner.to_bytes()
        assert client.get(f"{prefix}learner:w7") is not None
        state_key = store.state_key(next(iter(mem.states)))
        assert 0 < client.ttl(state_key) <= 60
        assert client.ttl(f"{prefix}learner:w7") == -1  # the learner does not expire
        other = RedisPageStore(client, prefix=prefix, worker_id="w8")
        assert other.get_learner() is None
    finally:
        store.delete_all()


def test_stats_of_mixed_known_unknown_and_corrupt_pages(store, client):
    rows = np.arange(3 * N_STATS, dtype=np.float32).reshape(3, N_STATS)
    for pid, row in zip((5, 7, 9), rows, strict=True):
        client.set(f"{store.prefix}t:{pid}", row.astype("<f4").tobytes())
    got = store.get_stats(np.array([7, 1, 5, 9, 7], dtype=np.int64))
    assert np.array_equal(got[[0, 2, 3, 4]], rows[[1, 0, 2, 1]])
    assert np.isnan(got[1]).all()
    client.set(f"{store.prefix}t:11", b"\x00" * 7)
    with pytest.raises(ValueError, match="stats row"):
        store.get_stats(np.array([5, 11], dtype=np.int64))


def test_sibling_groups_gains_and_follow_through_redis(store):
    """A multilingual site through Redis gives the related updates the memory store gives;
    a group's gain is only replaced by a newer one (a redelivered batch cannot regress it)."""
    events = site(rounds=4)
    assert related_of(events, batch=7, store=store) == related_of(events, batch=1)
    urls = sorted({e.url for e in events if "/deploy/" in e.url})
    group = store.get_siblings(["docs.example.org/guides/deploy/"])[0]
    assert sorted(group.urls) == urls and len(group.ids) == 3
    assert group.gain is not None and group.gain.links == 1.0
    assert store.get_follow() == SiblingFollow(2.0, 1.0, 2, 1)
    older = group.gain._replace(at=group.gain.at - 1.0, internal=9.0)
    store.write(
        PageWrites(
            states={}, stats={}, neighbours={}, gains={"docs.example.org/guides/deploy/": older}
        )
    )
    assert store.get_siblings(["docs.example.org/guides/deploy/"])[0].gain == group.gain
    newer = GroupGain(group.gain.at + 1.0, 2.0, 0.0, 7, group.gain.at)
    store.write(
        PageWrites(
            states={}, stats={}, neighbours={}, gains={"docs.example.org/guides/deploy/": newer}
        )
    )
    assert store.get_siblings(["docs.example.org/guides/deploy/"])[0].gain == newer
