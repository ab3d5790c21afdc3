"""docker-compose.yml's wiring, proven outside Docker.

Reads docker-compose.yml and runs its services' commands with the environment variables it
sets, on this machine: Kafka is a local Tansu broker (`lookaround broker`), Redis a local
redis-server started with the compose file's own arguments; host names (kafka:9092,
redis:6379) are remapped to 127.0.0.1 on free ports, container paths (the volumes) to temp
dirs, and each worker gets a free web port (in Docker both listen on 6066). Then:

topics init (twice: idempotent) -> two workers (healthy) -> the stand-in crawler's command
(generate + produce, a small crawl) -> every fetch the embedded replay applies gets a priority
update on the priorities topic, keyed by its URL -> the trainer's batch refresh command writes
models into the registry the workers read.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.kafka_io import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
LIVE_COMMANDS = ("worker", "broker", "topics", "produce", "replay-topic")
CRAWL_PAGES, CRAWL_ROUNDS = 150, 3

pytestmark = pytest.mark.timeout(900)


def _cli_commands() -> set[str]:
    import typer.main

    from streams.cli import app

    return set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _require(commands: tuple[str, ...], what: str) -> None:
    missing = [c for c in commands if c not in _cli_commands()]
    if missing:
        pytest.skip(f"{what} not available: lookaround {', '.join(missing)} missing")


def _stop(proc: subprocess.Popen, grace: float = 30.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Stack:
    """The compose file's services, remapped to this machine."""

    def __init__(self, compose: dict[str, Any], tmp: Path) -> None:
        self.compose = compose
        self.tmp = tmp
        self.kafka_port = free_port()
        self.redis_port = free_port()
        self.hosts = {
            "kafka:9092": f"127.0.0.1:{self.kafka_port}",
            "redis:6379": f"127.0.0.1:{self.redis_port}",
        }
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.procs: list[subprocess.Popen] = []
        self.bin = Path(sys.executable).parent

    def service(self, name: str) -> dict[str, Any]:
        return self.compose["services"][name]

    def volume_dir(self, volume: str) -> Path:
        path = self.tmp / "volumes" / volume
        path.mkdir(parents=True, exist_ok=True)
        return path

    def workdir(self, name: str) -> Path:
        """Each service its own working directory, as each container has its own."""
        path = self.tmp / "work" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def paths(self, name: str) -> dict[str, str]:
        """Container path -> local dir, from the service's volumes (named volumes shared)."""
        out = {"/tmp": str(self.tmp / f"{name}-tmp")}
        Path(out["/tmp"]).mkdir(exist_ok=True)
        for spec in self.service(name).get("volumes", []):
            source, target = spec.split(":")[:2]
            out[target] = str(self.volume_dir(source))
        return out

    def remap(self, name: str, text: str) -> str:
        for host, local in self.hosts.items():
            text = text.replace(host, local)
        paths = self.paths(name)
        pattern = "|".join(re.escape(t) for t in sorted(paths, key=len, reverse=True))
        # One pass, so a path already remapped is not remapped again.
        return re.sub(rf"(?<![\w/.-])({pattern})(?![\w.-])", lambda m: paths[m.group(1)], text)

    def env(self, name: str, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOKAROUND_")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        for key, value in self.service(name).get("environment", {}).items():
            env[key] = self.remap(name, str(value))
        env.update(extra)
        return env

    def argv(self, name: str) -> list[str]:
        """The service's command as the image runs it (entrypoint `lookaround` unless set)."""
        svc = self.service(name)
        entrypoint = svc.get("entrypoint", ["lookaround"])
        command = [self.remap(name, c.replace("$$", "$")) for c in svc["command"]]
        argv = [*entrypoint, *command]
        if argv[0] == "lookaround":
            argv[0] = str(self.bin / "lookaround")
        return argv

    def run(self, name: str, argv: list[str] | None = None, timeout: float = 300, **extra: str):
        log = self.logs / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.run(
                argv or self.argv(name),
                env=self.env(name, **extra),
                cwd=self.workdir(name),
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        assert proc.returncode == 0, f"{name} failed:\n{log.read_text()[-4000:]}"

    def start(self, name: str, argv: list[str] | None = None, **extra: str) -> subprocess.Popen:
        out = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            argv or self.argv(name),
            env=self.env(name, **extra),
            cwd=self.workdir(name),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def close(self) -> None:
        for proc in reversed(self.procs):
            _stop(proc)


def _health(port: int) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError):
        return 0, None


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    _require(LIVE_COMMANDS, "live pipeline commands")
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed (.ci/run installs it)")
    compose = yaml.safe_load(COMPOSE.read_text())
    s = Stack(compose, tmp_path_factory.mktemp("compose"))
    try:
        # Kafka: a local Tansu broker instead of apache/kafka.
        s.start("kafka", [str(s.bin / "lookaround"), "broker", "--port", str(s.kafka_port)])
        wait_for_port(s.kafka_port, timeout=30.0)
        # Redis: the compose service's own command (AOF on), on a free port, data in a temp dir.
        redis_dir = s.volume_dir("redis-data")
        s.start(
            "redis",
            [
                *s.service("redis")["command"],
                *("--port", str(s.redis_port), "--bind", "127.0.0.1", "--dir", str(redis_dir)),
            ],
        )
        wait_for_port(s.redis_port, timeout=30.0)
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def workers(stack: Stack) -> dict[str, int]:
    """topics init, then every worker service of the compose file; name -> web port."""
    stack.run("topics")
    stack.run("topics")  # a second run finds the topics and succeeds
    names = [
        n
        for n, svc in stack.compose["services"].items()
        if svc.get("command") == ["worker"] and n.startswith("worker")
    ]
    assert len(names) >= 2
    ports = {name: free_port() for name in names}
    for name in names:
        stack.start(name, LOOKAROUND_WEB_PORT=str(ports[name]))
    deadline = time.monotonic() + 180
    pending = dict(ports)
    while pending and time.monotonic() < deadline:
        for name, port in list(pending.items()):
            if _health(port)[0] == 200:
                del pending[name]
        time.sleep(0.5)
    assert not pending, "workers not healthy: " + "\n".join(
        f"{n}:\n{stack.log(n)}" for n in pending
    )
    return ports


def _expected_priorities(stack: Stack, events: Path) -> set[tuple[str, str]]:
    """(url, fetched_at) of every fetch the embedded replay applies to this crawl."""
    out = stack.tmp / "embedded"
    subprocess.run(
        [str(stack.bin / "lookaround"), "replay", str(events), "--out", str(out), "--quiet"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    with gzip.open(out / "priorities.jsonl.gz", "rt") as fh:
        return {_key(json.loads(line)) for line in fh}


def _key(update: dict[str, Any]) -> tuple[str, str]:
    from datetime import datetime

    fetched = datetime.fromisoformat(str(update["fetched_at"]).replace("Z", "+00:00"))
    return update["url"], fetched.isoformat()


def _read_priorities(
    stack: Stack, want: set[tuple[str, str]], timeout: float = 240
) -> dict[tuple[str, str], tuple[bytes | None, dict[str, Any]]]:
    from kafka import KafkaConsumer

    env = stack.env("worker-1")
    consumer = KafkaConsumer(
        env.get("LOOKAROUND_TOPIC_PRIORITIES", "lookaround.priorities"),
        bootstrap_servers=env["LOOKAROUND_KAFKA_BOOTSTRAP"],
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    got: dict[tuple[str, str], tuple[bytes | None, dict[str, Any]]] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not want <= set(got):
            for records in consumer.poll(timeout_ms=1000).values():
                for record in records:
                    update = json.loads(record.value)
                    got[_key(update)] = (record.key, update)
    finally:
        consumer.close()
    return got


@pytest.fixture(scope="module")
def crawl(stack: Stack, workers: dict[str, int]) -> set[tuple[str, str]]:
    """The stand-in crawler's command (generate + produce), with a small crawl."""
    stack.run("crawler", CRAWL_PAGES=str(CRAWL_PAGES), CRAWL_ROUNDS=str(CRAWL_ROUNDS))
    events = Path(stack.paths("crawler")["/tmp"]) / "crawl.jsonl.gz"
    assert events.is_file()
    return _expected_priorities(stack, events)


def test_compose_pipeline_gives_every_applied_fetch_a_priority(
    stack: Stack, workers: dict[str, int], crawl: set[tuple[str, str]]
) -> None:
    assert len(crawl) >= CRAWL_PAGES  # at least every page's first fetch
    got = _read_priorities(stack, crawl)
    missing = crawl - set(got)
    assert not missing, (
        f"{len(missing)} of {len(crawl)} applied fetches got no priority, e.g. "
        f"{sorted(missing)[:3]}\n" + "\n".join(f"--- {n}:\n{stack.log(n)}" for n in workers)
    )
    for key, (record_key, update) in got.items():
        assert record_key == key[0].encode(), "priorities are keyed by URL"
        assert update["score"] == update["score"]  # finite, not NaN
        assert 0.0 <= update["p_new"] <= 1.0
    # Both workers still healthy, their metrics served where Prometheus scrapes them.
    for name, port in workers.items():
        status, body = _health(port)
        assert status == 200, (name, body)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert "# TYPE" in text, name


def test_compose_trainer_refreshes_the_registry(
    stack: Stack, workers: dict[str, int], crawl: set[tuple[str, str]]
) -> None:
    _require(("train",), "batch model commands")
    trainer = stack.service("trainer")
    refresh = trainer["environment"]["BATCH_REFRESH"]
    registry = Path(stack.paths("trainer")[trainer["environment"]["LOOKAROUND_REGISTRY_DIR"]])
    assert not any(registry.iterdir())
    # One iteration of the trainer's loop: its BATCH_REFRESH command, as its sh would run it.
    stack.run("trainer", ["/bin/sh", "-c", stack.remap("trainer", refresh)], timeout=600)
    run_dir = Path(stack.paths("trainer")["/data"]) / "run"
    assert (run_dir / "features.parquet").is_file()
    assert any(registry.rglob("*")), "the trainer wrote nothing to the registry"
    # The workers read the same volume.
    for name in workers:
        assert Path(stack.paths(name)[trainer["environment"]["LOOKAROUND_REGISTRY_DIR"]]) == (
            registry
        )
