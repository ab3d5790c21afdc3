"""RedisPageStore against real servers, one Redis (127.0.0.1:6379) and a Redis Cluster (3
masters with a replica each, started by the fixture): round trips, atomic idempotent writes,
TTL, the learner with the pages, parity with the in-memory store, hash tags and slots, the
cluster's write phases, replicas' acknowledgement and refused records."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from online.ensemble_state import EnsembleState
from online.features import N_STATS, STATS_WIDE
from online.hedge import AdaHedge
from online.history import PageState, _to_bytes_v2, states_equal, to_bytes
from online.links import url_id
from online.pipeline import PipelineConfig
from online.related_updates import GroupGain, SiblingFollow
from online.scorers import DEFAULT_SCORER
from online.state_codec import MAGIC, StateRefused
from online.stores import (
    ID_PREFIX_SHIFT,
    MemoryPageStore,
    Neighbours,
    PageWrites,
    pack_floats,
    to_half,
)
from streams.redis_scripts import RECORD_HEADS
from streams.redis_store import (
    RedisPageStore,
    StoreUnavailable,
    slot_tags,
    tag_slot,
)
from tests.test_pipeline import DIM, comparable, crawl, run
from tests.test_related_updates import related_of, site

redis = pytest.importorskip("redis")


@pytest.fixture
def store(backend):
    s = backend.store(f"test:{uuid.uuid4().hex[:12]}:", worker_id="w1")
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
    pids = mem.stats_ids()
    assert np.array_equal(store.get_stats(pids), mem.get_stats(pids), equal_nan=True)
    unknown = store.get_stats(np.array([123456789], dtype=np.int64))
    assert unknown.shape == (1, N_STATS) and np.isnan(unknown).all()
    for pid in pids.tolist():
        a, b = store.get_neighbours([pid])[0], mem.get_neighbours([pid])[0]
        assert (a is None) == (b is None)
        if a is not None:
            assert np.array_equal(a.ids, b.ids) and np.array_equal(a.weights, b.weights)
            assert np.array_equal(a.found_with, b.found_with) and a.found_cos == b.found_cos
    for pid, row in zip(pids.tolist(), store.get_rows(pids.tolist()), strict=True):
        assert (row is None) == (mem.rows.get(pid) is None)
        assert row is None or np.array_equal(row, mem.rows[pid], equal_nan=True)
    assert store.get_rows([987654321]) == [None]
    assert store.get_learner() is None
    assert store.pages() == len(urls)


@pytest.mark.parametrize(
    ("batch", "scorer"), [(1, "lbla"), (13, "lbla"), (1000, "lbla"), (7, "ensemble")]
)
def test_parity_with_memory_store(store, batch, scorer):
    """The same priorities and features as the memory store; with a learning scorer the
    learner learns from rows whose look-around part came back from Redis."""
    events = crawl()
    _, expected = run(events, batch=batch, scorer=scorer)
    _, got = run(events, batch=batch, store=store, scorer=scorer)
    assert comparable(got) == comparable(expected)


@pytest.mark.parametrize("scorer", ["lbla", "ensemble"])
def test_the_compact_store_keeps_parity_with_memory_store(store, scorer):
    """With the compact store's records (related pages' ids by their top bits, weights a byte,
    the history's kept fingerprints) Redis gives the pipeline what the memory store gives it:
    the same priorities and features, and the same related pages found again by their ids."""
    config = PipelineConfig(embedding_dim=DIM, neighbours=5, compact_store=True)
    events = crawl()
    mem_pipe, expected = run(events, batch=13, scorer=scorer, config=config)
    _, got = run(events, batch=13, store=store, scorer=scorer, config=config)
    assert comparable(got) == comparable(expected)
    pids = list(mem_pipe.store.neighbours)
    stored = store.get_neighbours(pids)
    assert all(n is not None and n.short_ids for n in stored)
    for mine, theirs in zip(stored, mem_pipe.store.get_neighbours(pids), strict=True):
        assert np.array_equal(mine.ids >> ID_PREFIX_SHIFT, theirs.ids >> ID_PREFIX_SHIFT)
        assert np.array_equal(mine.weights, theirs.weights)


def snapshot(store: RedisPageStore) -> dict:
    """Every key of the store, its bytes; a cluster's write journal aside (the last write's
    calls, not a record: `RedisPageStore.finish_interrupted_write`)."""
    return {k: store.client.get(k) for k in store.keys() if b"}journal:" not in k}  # noqa: SIM118


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
            stats={pid: old.stats(pid) for pid in old.stats_ids().tolist()},
            neighbours=dict(old.neighbours),
            siblings=dict(old.siblings),  # the groups' URLs again: never listed twice
        )
    )
    assert snapshot(store) == before
    assert store.skipped >= len(urls)


def test_learner_written_with_pages_and_ttl(backend):
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    store = backend.store(prefix, ttl=60, worker_id="w7")
    client = backend.client
    try:
        events = crawl(pages=3, rounds=1)
        mem = MemoryPageStore()
        run(events, batch=10, store=mem)
        learner = EnsembleState(AdaHedge(2), epochs=3)  # stored as data, not pickle
        store.write(
            PageWrites(
                states=dict(mem.states),
                stats={pid: mem.stats(pid) for pid in mem.stats_ids().tolist()},
                neighbours={1: Neighbours(np.array([2]), np.array([1.0], np.float32), 2)},
                learner=learner,
            )
        )
        assert store.get_learner().to_bytes() == learner.to_bytes()
        assert store.learner_key.startswith(prefix) and store.learner_key.endswith("learner:w7")
        assert client.get(store.learner_key) is not None
        state_key = store.state_key(next(iter(mem.states)))
        assert 0 < client.ttl(state_key) <= 60
        assert 0 < client.ttl(store.page_key(1)) <= 60  # a record without a state too
        assert client.ttl(store.learner_key) == -1  # the learner does not expire
        other = backend.store(prefix, worker_id="w8")
        assert other.get_learner() is None
    finally:
        store.delete_all()


def _record(stats: bytes = b"", state: bytes = b"", nbrs: bytes = b"", row: bytes = b"") -> bytes:
    """A page record as the store laid it out in version 1 (for planting damaged ones and
    records written before version 2)."""
    lengths = (len(stats), len(state), len(nbrs), len(row), 0)
    return RECORD_HEADS[1].pack(1, *lengths) + stats + state + nbrs + row


def test_stats_of_mixed_known_unknown_and_corrupt_pages(store):
    rows = np.arange(3 * N_STATS, dtype=np.float32).reshape(3, N_STATS)
    rows[0, 0] = 1 / 3  # not a half-precision value: that row is kept in float32
    rows[1:] = to_half(rows[1:], STATS_WIDE)
    store.write(PageWrites(states={}, stats=dict(zip((5, 7, 9), rows, strict=True)), neighbours={}))
    got = store.get_stats(np.array([7, 1, 5, 9, 7], dtype=np.int64))
    assert np.array_equal(got[[0, 2, 3, 4]], rows[[1, 0, 2, 1]])
    assert np.isnan(got[1]).all()
    store.client.set(store.page_key(11), _record(stats=b"\x01" + b"\x00" * 7))
    with pytest.raises(ValueError, match="stats row of page 11 is damaged"):
        store.get_stats(np.array([5, 11], dtype=np.int64))
    store.client.set(store.page_key(13), b"not ours")
    with pytest.raises(ValueError, match="record of page 13 is not a lookaround page record"):
        store.get_stats(np.array([13], dtype=np.int64))
    url = "https://damaged.example/"
    store.client.set(store.state_key(url), _record(state=b"\x09garbage"))
    with pytest.raises(ValueError, match="not a lookaround page state"):
        store.get_states([url])
    store.client.set(store.page_key(15), _record(nbrs=b"\x07"))
    with pytest.raises(ValueError, match="unknown neighbours format"):
        store.get_neighbours([15])


def test_records_and_states_of_every_version_are_read_and_ordered_by_fetch_time(store):
    """A record written before version 2 (16-byte head) holding a version 2 state (float64
    time) is read as it is; the write script keeps the newest state whichever version holds
    each time (a version 3 state's uint32 seconds, or float64 where the time is not whole),
    and writes the record back with version 2's 8-byte head, its other sections kept; a
    record whose sections do not fit those 8 bytes is written with version 1's head."""
    url = "https://versions.example/page"
    old = PageState(last_fetched_at=1_767_225_600.0, fetches=4, sn=(1.0, 2.0, 0.25, 0.5))
    stats = pack_floats(np.arange(N_STATS, dtype=np.float32), STATS_WIDE)
    store.client.set(store.state_key(url), _record(stats=stats, state=_to_bytes_v2(old)))
    assert states_equal(store.get_states([url])[0], old)
    earlier = old._replace(last_fetched_at=old.last_fetched_at - 1.0, fetches=9)
    store.write(PageWrites(states={url: earlier}, stats={}, neighbours={}))
    assert store.get_states([url])[0].fetches == 4 and store.skipped == 1  # older: kept out
    assert store.client.get(store.state_key(url))[0] == 1  # not rewritten
    later = old._replace(last_fetched_at=old.last_fetched_at + 1.0, fetches=5)
    assert to_bytes(later)[1] & 8  # its time as uint32 seconds
    store.write(PageWrites(states={url: later}, stats={}, neighbours={}))
    record = store.client.get(store.state_key(url))
    assert record[0] == 2 and len(record) == 8 + len(stats) + len(to_bytes(later))
    assert store.get_states([url])[0] == later
    np.testing.assert_array_equal(store.get_stats(np.array([url_id(url)]))[0], np.arange(N_STATS))
    half = later._replace(last_fetched_at=later.last_fetched_at + 0.5, fetches=6)
    assert not to_bytes(half)[1] & 8  # float64: not a whole second
    store.write(PageWrites(states={url: half}, stats={}, neighbours={}))
    store.write(PageWrites(states={url: later._replace(fetches=7)}, stats={}, neighbours={}))
    assert store.get_states([url])[0] == half
    # a group too long for version 2's one-byte length: version 1's head, read the same
    key = "versions.example/page"
    members = [f"https://versions.example/l{i:02d}-translated/page" for i in range(30)]
    store.write(PageWrites(states={}, stats={}, neighbours={}, siblings={key: members}))
    home = store.client.get(store.page_key(store.group_home(key)))
    assert home[0] == 1 and len(home) > 16 + 255
    assert store.get_siblings([key])[0].urls == tuple(members)
    assert store.get_states([url])[0] == half


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
    # a redelivered first sighting appends nothing: each URL is listed once
    key = "docs.example.org/guides/deploy/"
    again = {key: [urls[0], "https://docs.example.org/xx/guides/deploy/"]}
    store.write(PageWrites(states={}, stats={}, neighbours={}, siblings=again))
    assert store.get_siblings([key])[0].urls == (*group.urls, again[key][1])
    home = store.client.get(store.page_key(store.group_home(key)))
    assert home.endswith("".join(f"{u}\n" for u in (*group.urls, again[key][1])).encode())


def test_a_group_lives_in_its_home_page_record(backend):
    """A page whose URL is https:// + its sibling key keeps its group in its own record (as
    ``*``: a few bytes, no key); a translation joins that record's list by URL. The record
    expires with its page while the group has one member, and stays once it has two; a home
    record no page has fetched holds only the group and does not expire."""
    store = backend.store(f"test:{uuid.uuid4().hex[:12]}:", ttl=60)
    try:
        home, translation = "https://t.example/guide/", "https://t.example/fr/guide/"
        key = "t.example/guide/"
        state = PageState(last_fetched_at=1.0)
        store.write(
            PageWrites(states={home: state}, stats={}, neighbours={}, siblings={key: [home]})
        )
        assert store.keys() == [store.state_key(home).encode()]
        assert store.client.get(store.state_key(home)).endswith(b"*\n")
        assert 0 < store.client.ttl(store.state_key(home)) <= 60
        assert store.get_siblings([key])[0].urls == (home,)
        store.write(
            PageWrites(
                states={translation: state}, stats={}, neighbours={}, siblings={key: [translation]}
            )
        )
        assert store.get_siblings([key])[0].urls == (home, translation)
        assert store.client.ttl(store.state_key(home)) == -1  # two members: it stays
        assert 0 < store.client.ttl(store.state_key(translation)) <= 60
        later = PageWrites(
            states={home: state._replace(last_fetched_at=2.0)}, stats={}, neighbours={}
        )
        store.write(later)
        assert store.client.ttl(store.state_key(home)) == -1
        assert store.get_states([home])[0].last_fetched_at == 2.0
        assert store.get_siblings([key])[0].urls == (home, translation)
        # a group whose home page was never fetched: its home record holds the group only
        other = {"u.example/x": ["https://www.u.example/de/x"]}
        store.write(PageWrites(states={}, stats={}, neighbours={}, siblings=other))
        assert store.client.ttl(store.page_key(store.group_home("u.example/x"))) == -1
        assert store.get_siblings(["u.example/x"])[0].urls == ("https://www.u.example/de/x",)
        assert store.get_states(["https://u.example/x"]) == [None]
        assert len(store.keys()) == 3 and store.pages() == 2  # a home only is no page
    finally:
        store.delete_all()


# -- hash tags, slots and the cluster's writes ---------------------------------------------------


def test_slot_tags_lie_evenly_over_the_slots():
    tags = slot_tags(1024)
    assert [tag_slot(t) for t in tags] == [16 * i for i in range(1024)]
    assert slot_tags(16384) == slot_tags(16384)  # the same tags for every worker
    assert len({tag_slot(t) for t in slot_tags(16384)}) == 16384
    assert [tag_slot(t) for t in slot_tags(3)] == [0, 5461, 10922]
    with pytest.raises(ValueError, match="between 1 and 16384"):
        slot_tags(0)


def test_keys_are_tagged_by_page_id_sibling_key_and_worker(store):
    from redis.crc import key_slot

    tags = store.tags
    for pid in (0, 5, 1023, 1024, 2**62 + 7):
        key = store.page_key(pid)
        assert key == f"{store.prefix}{{{tags[pid % len(tags)]}}}p:{pid}"
        assert key_slot(key.encode()) == tag_slot(tags[pid % len(tags)])
    url = "https://a.example/x"
    assert store.state_key(url) == store.page_key(url_id(url))
    assert store.group_home("a.example/x") == url_id("https://a.example/x")
    worker = {key_slot(k.encode()) for k in (store.learner_key, store.allocation_key)}
    assert worker == {key_slot(store.follow_key.encode())}
    with pytest.raises(ValueError, match="braces"):
        RedisPageStore(store.client, prefix="a{b}:")


def test_tags_spread_over_the_masters_in_proportion(redis_cluster):
    """Each master holds the tags of its slots: its share of the 1,024 within one."""
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(redis_cluster.url)
    try:
        count: dict[str, int] = {}
        for tag in slot_tags(1024):
            node = client.nodes_manager.get_node_from_slot(tag_slot(tag))
            count[node.name] = count.get(node.name, 0) + 1
        assert len(count) == 3 and all(abs(n - 1024 / 3) <= 1 for n in count.values())
    finally:
        client.close()


def _scripts_run(client) -> int:
    """EVALSHA calls served by the cluster's masters so far."""
    total = 0
    for node in client.get_primaries():
        stats = client.get_redis_connection(node).info("commandstats")
        total += int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    return total


def test_a_cluster_write_is_one_script_per_slot_in_three_phases(redis_cluster):
    """A batch of pages over 8 tags, two sibling groups and a learner: one script for the
    worker's keys (with the batch's journal: a crash part way is finished from it, below),
    one per group tag, one per tag for the pages; reads are one script per tag."""
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(redis_cluster.url)
    store = RedisPageStore(client, prefix=f"test:{uuid.uuid4().hex[:12]}:", tags=8)
    try:
        mem = MemoryPageStore()
        run(crawl(pages=40, rounds=1), batch=100, store=mem)
        assert len({url_id(u) % 8 for u in mem.states}) == 8
        groups = {"a.example/x": ["https://a.example/x"], "b.example/y": ["https://b.example/y"]}
        writes = PageWrites(
            states=dict(mem.states),
            stats={pid: mem.stats(pid) for pid in mem.stats_ids().tolist()},
            neighbours=dict(mem.neighbours),
            siblings=groups,
            learner=EnsembleState(AdaHedge(2), epochs=1),
        )
        group_tags = {store.group_home(k) % 8 for k in groups}
        before = _scripts_run(client)
        store.write(writes)
        assert _scripts_run(client) - before == len(group_tags) + 8 + 1
        before = _scripts_run(client)
        pids = mem.stats_ids()
        assert np.array_equal(store.get_stats(pids), mem.get_stats(pids), equal_nan=True)
        assert _scripts_run(client) - before == 8
        assert store.written == len(mem.states) and store.get_learner().epochs == 1
    finally:
        store.delete_all()
        client.close()


class _Died(Exception):
    """The worker's process ending where it stood (a SIGKILL, as far as the store knows)."""


class _DiesPartWay(RedisPageStore):
    """A store whose worker dies after ``round_trips`` of a write's script round trips."""

    def __init__(self, *args, round_trips: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.left = round_trips

    def _run_one(self, node, calls, ack_tag=None, *, journal=None):
        if calls or journal is not None:
            if self.left == 0:
                raise _Died
            self.left -= 1
        return super()._run_one(node, calls, ack_tag, journal=journal)


def _records(store: RedisPageStore) -> dict[bytes, bytes]:
    """`snapshot`, by key less the prefix (so two stores' can be compared)."""
    return {k[len(store.prefix) :]: v for k, v in snapshot(store).items()}


def _batch_of_a_cluster_write() -> PageWrites:
    """Pages over 8 tags, two sibling groups, a gain and a learner: every phase of a write."""
    mem = MemoryPageStore()
    run(crawl(pages=40, rounds=2), batch=100, store=mem, scorer=DEFAULT_SCORER)
    return PageWrites(
        states=dict(mem.states),
        stats={pid: mem.stats(pid) for pid in mem.stats_ids().tolist()},
        neighbours=dict(mem.neighbours),
        siblings={"a.example/x": ["https://a.example/x"], "b.example/y": ["https://b.example/y"]},
        gains={"a.example/x": GroupGain(1_767_225_600.0, 3.0, 0.0, url_id("https://a.example/x"))},
        learner=mem.learner,  # the default scorer's, as a worker's
    )


@contextmanager
def cut_short_write(
    client, prefix: str, worker_id: str, round_trips: int
) -> Iterator[tuple[RedisPageStore, PageWrites]]:
    """A batch (`_batch_of_a_cluster_write`) written whole under ``"whole-" + prefix`` and cut
    short under ``prefix`` by a worker dying after ``round_trips`` script round trips; yields
    the whole write's store and the batch; deletes both stores' keys after."""
    whole = RedisPageStore(client, prefix=f"whole-{prefix}", tags=8, worker_id=worker_id)
    dying = _DiesPartWay(
        client, prefix=prefix, tags=8, worker_id=worker_id, round_trips=round_trips
    )
    try:
        writes = _batch_of_a_cluster_write()
        whole.write(writes)
        with pytest.raises(_Died):
            dying.write(writes)
        assert _records(dying) != _records(whole)
        yield whole, writes
    finally:
        whole.delete_all()
        dying.delete_all()


@pytest.mark.parametrize("round_trips", [1, 2, 4])
def test_a_cluster_write_cut_short_is_finished_from_its_journal(redis_cluster, round_trips):
    """A worker dying between two slots' scripts (after its learner and journal; after the
    groups; part way through the pages) leaves a batch part written; the worker started
    again finishes it from the journal before anything else, so the store is byte for byte
    what the whole write leaves, and the journal is gone; running it again changes nothing."""
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(redis_cluster.url)
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    try:
        with cut_short_write(client, prefix, "w", round_trips) as (whole, writes):
            restarted = RedisPageStore(client, prefix=prefix, tags=8, worker_id="w")
            run_again = restarted.finish_interrupted_write()
            assert run_again == 2 + 8  # two group tags (the gain shares one), 8 page tags
            assert _records(restarted) == _records(whole)
            assert restarted.get_learner() is not None
            assert restarted.finish_interrupted_write() == 0  # the journal was dropped
            assert whole.finish_interrupted_write() == 0  # a write that finished drops its own
            # a worker dying right after its journal: the journal run again changes nothing
            with pytest.raises(_Died):
                _DiesPartWay(client, prefix=prefix, tags=8, worker_id="w", round_trips=1).write(
                    writes
                )
            assert restarted.finish_interrupted_write() == run_again
            assert _records(restarted) == _records(whole)
    finally:
        client.close()


def test_a_journal_that_is_not_ours_is_refused(redis_cluster):
    """Bytes that are not a journal, or a journal reaching past the store's prefix or tags,
    are refused with the reason, and nothing of them is run."""
    from redis.cluster import RedisCluster

    from streams.write_journal import JournalCall, encode

    client = RedisCluster.from_url(redis_cluster.url)
    store = RedisPageStore(client, prefix=f"test:{uuid.uuid4().hex[:12]}:", tags=8, worker_id="w")
    elsewhere = b"other:{" + store.tags[0].encode() + b"}p:1"
    outside = encode([JournalCall(0, 0, "write", [elsewhere], [b"0", b"0", b"0", b"0"])])
    other_script = encode([JournalCall(0, 0, "read", [], [])])
    try:
        for blob, reason in [
            (b"\x80\x03pickle", "version byte"),
            (b"\x01\x05\x00\x00\x00", "damaged"),
            (outside, "outside its prefix"),
            (other_script, "script 'read'"),
        ]:
            client.set(store.journal_key, blob)
            with pytest.raises(ValueError, match=reason):
                store.finish_interrupted_write()
        assert client.get(elsewhere) is None
    finally:
        store.delete_all()
        client.close()


def test_one_server_writes_no_journal(redis_client):
    """One server's write is one atomic script: nothing to finish, no journal kept."""
    store = RedisPageStore(redis_client, prefix=f"test:{uuid.uuid4().hex[:12]}:", worker_id="w")
    try:
        store.write(_batch_of_a_cluster_write())
        assert redis_client.get(store.journal_key) is None
        assert store.finish_interrupted_write() == 0
    finally:
        store.delete_all()


def test_writes_wait_for_the_replicas(backend):
    """With ``wait_replicas`` a write returns once that many replicas have it; more replicas
    than a master has make it fail as unavailable (the worker retries the batch)."""
    if backend.name == "single":
        pytest.skip("the Redis at 127.0.0.1:6379 has no replica")
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    state = {"https://a.example/": PageState(last_fetched_at=1.0)}
    ok = backend.store(prefix, wait_replicas=1, wait_timeout_ms=5000)
    try:
        ok.write(PageWrites(states=state, stats={}, neighbours={}))
        assert ok.get_states(list(state))[0].last_fetched_at == 1.0
        too_many = backend.store(prefix, wait_replicas=2, wait_timeout_ms=200)
        # the one replica may not answer within the 200 ms on a busy machine: 0 or 1 of 2
        with pytest.raises(StoreUnavailable, match=r"[01] of 2 replicas acknowledged"):
            too_many.write(PageWrites(states={}, stats={}, neighbours={}, learner=b"x"))
    finally:
        ok.delete_all()


def test_operator_scans_cover_every_master(backend):
    store = backend.store(f"test:{uuid.uuid4().hex[:12]}:")
    try:
        states = {f"https://k.example/{i}": PageState(last_fetched_at=1.0) for i in range(300)}
        store.write(PageWrites(states=states, stats={}, neighbours={}))
        assert store.pages() == 300
        assert len(store.keys()) == 300
        assert store.ping()
        assert store.delete_all() == 300
        assert store.keys() == [] and store.get_states(list(states)) == [None] * 300
    finally:
        store.delete_all()


def _waiting(blocks: int) -> EnsembleState:
    """A learner state with ``blocks`` blocks of two waiting labels each."""
    state = EnsembleState(AdaHedge(2))
    for b in range(blocks):
        rows = np.full((2, 3), float(b), dtype=np.float32)
        state.pending.add(rows, np.array([[1, 0, 7, 1, 10.0 * b], [0, 0, 7, 0, 10.0 * b + 1]]))
    return state


def _blocks_in(store, backend) -> set[int]:
    return {int(k.rsplit(b":", 1)[1]) for k in store._scan(f"{store.learner_key}:b:*")}


def test_the_learners_waiting_labels_are_stored_a_block_once(store, backend):
    """Each block of waiting labels is written once, when a state first names it, and
    deleted when the state no longer names it; the learner read back is the one written."""
    state = _waiting(3)
    store.write(PageWrites(states={}, stats={}, neighbours={}, learner=state))
    assert _blocks_in(store, backend) == {0, 1, 2}
    marker = b"not written again"
    store._worker_keys("set", store.block_key(0), marker)
    store.write(PageWrites(states={}, stats={}, neighbours={}, learner=state))
    assert store._worker_keys("get", store.block_key(0)) == marker  # not written again
    store._worker_keys("set", store.block_key(0), state.pending.block_blobs()[0])
    state.pending.take(3)  # block 0 and the first row of block 1
    state.pending.add(np.ones((1, 3)), np.array([[2, 1, 7, 1, 50.0]]))
    store.write(PageWrites(states={}, stats={}, neighbours={}, learner=state))
    assert _blocks_in(store, backend) == {1, 2, 3}
    back = backend.store(store.prefix, worker_id="w1").get_learner()
    assert back.to_bytes() == state.to_bytes()
    assert back.pending.refs() == [(1, 1), (2, 0), (3, 0)]


def test_blocks_a_dead_worker_left_are_deleted_and_a_missing_one_refused(store, backend):
    state = _waiting(4)
    store.write(PageWrites(states={}, stats={}, neighbours={}, learner=state))
    state.pending.take(4)  # blocks 0 and 1
    blobs = state.pending.block_blobs()
    store.write(PageWrites(states={}, stats={}, neighbours={}, learner=state))
    assert _blocks_in(store, backend) == {2, 3}
    # died after writing the state, before deleting what it no longer names
    store._worker_keys("mset", {store.block_key(0): b"old", store.block_key(1): b"old"})
    again = backend.store(store.prefix, worker_id="w1")
    assert again.get_learner().to_bytes() == state.to_bytes()
    assert _blocks_in(store, backend) == {2, 3}
    # a block the state names is gone: refused (the worker starts a fresh learner)
    store._worker_keys("unlink", store.block_key(3))
    with pytest.raises(StateRefused, match="block 3 is missing"):
        backend.store(store.prefix, worker_id="w1").get_learner()
    assert store._worker_keys("get", f"{store.learner_key}:refused").startswith(MAGIC)
    assert blobs[2] == store._worker_keys("get", store.block_key(2))
