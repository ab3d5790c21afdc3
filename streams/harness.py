"""Running real workers for tests and benchmarks: a `lookaround worker` subprocess with its
settings in LOOKAROUND_* variables, and waits on what it has done (Redis, web endpoints)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from streams.kafka_io import free_port
from streams.settings import Settings


def settings_env(settings: Settings) -> dict[str, str]:
    """The LOOKAROUND_* variables that rebuild ``settings`` in another process."""
    env = {}
    for name, value in settings.model_dump(mode="json").items():
        if value is None:
            continue
        secret = getattr(settings, name)
        if hasattr(secret, "get_secret_value"):
            value = secret.get_secret_value()
        env[f"LOOKAROUND_{name.upper()}"] = str(value)
    return env


class WorkerProcess:
    """``lookaround worker`` in a subprocess; its log goes to ``log``."""

    def __init__(self, settings: Settings, log: Path) -> None:
        self.settings = settings
        self.log = log
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.web_port}"

    def start(self) -> WorkerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOKAROUND_")}
        env.update(settings_env(self.settings))
        out = open(self.log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        return self

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()
        except (urllib.error.URLError, OSError):
            return 0, b""

    def health(self) -> tuple[int, dict[str, Any]]:
        status, body = self.get("/health")
        try:
            return status, orjson.loads(body) if body else {}
        except orjson.JSONDecodeError:
            return status, {}

    def metric(self, name: str) -> float:
        """Sum of a metric's samples (0 if absent)."""
        _, body = self.get("/metrics")
        total = 0.0
        for line in body.decode().splitlines():
            if line.startswith(name) and not line.startswith("#"):
                head, _, value = line.rpartition(" ")
                if head == name or head.startswith(name + "{"):
                    total += float(value)
        return total

    def cpu_seconds(self) -> tuple[float, float]:
        """(CPU seconds of the worker process, of its live child processes: the parser)."""
        if not self.alive():
            return 0.0, 0.0
        pid = self.proc.pid  # type: ignore[union-attr]
        tick = os.sysconf("SC_CLK_TCK")

        def stat(p: int | str) -> list[str]:
            text = Path(f"/proc/{p}/stat").read_text()
            return text[text.rindex(")") + 2 :].split()

        main = stat(pid)
        own = (int(main[11]) + int(main[12])) / tick
        children = 0.0
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = stat(entry.name)
                except (OSError, ValueError):
                    continue
                if int(fields[1]) == pid:
                    children += (int(fields[11]) + int(fields[12])) / tick
        return own, children

    def wait_healthy(self, timeout: float = 60.0) -> None:
        wait_for(lambda: self.health()[0] == 200, timeout, f"worker healthy ({self.log})", self)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()  # type: ignore[union-attr]
            self.proc.wait()  # type: ignore[union-attr]

    def stop(self, timeout: float = 30.0) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                self.kill()


def wait_for(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    worker: WorkerProcess | None = None,
    every: float = 0.2,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if worker is not None and not worker.alive():
            tail = worker.log.read_bytes()[-3000:].decode("utf-8", "replace")
            raise RuntimeError(f"worker exited while waiting for {what}:\n{tail}")
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def worker_settings(bootstrap: str, prefix: str, **overrides: Any) -> Settings:
    """Settings of a test worker: its own topics, Redis keys, group and web port."""
    values: dict[str, Any] = {
        "kafka_bootstrap": bootstrap,
        "topic_fetched": f"{prefix}.fetched",
        "topic_priorities": f"{prefix}.priorities",
        "topic_embeddings": f"{prefix}.embeddings",
        "topic_dead_letter": f"{prefix}.dead-letter",
        "topic_partitions": 1,
        "redis_key_prefix": f"{prefix}:",
        "app_id": prefix,
        "web_port": free_port(),
        "kafka_session_timeout_seconds": 6.0,
        "kafka_rebalance_timeout_seconds": 4.0,
        "log_level": "INFO",
    }
    values.update(overrides)
    return Settings(**values)


def two_busy_workers(
    settings: Settings, start: Callable[[Settings, str], WorkerProcess], timeout: float = 60.0
) -> Callable[[], tuple[WorkerProcess, WorkerProcess]]:
    """Start workers ``a`` and ``b`` (own web ports) with ``start`` and wait until both are
    healthy; the returned callable then waits until both have taken events, and gives them."""
    a = start(settings.model_copy(update={"worker_id": "a"}), "a")
    b = start(settings.model_copy(update={"worker_id": "b", "web_port": free_port()}), "b")
    a.wait_healthy()
    b.wait_healthy()

    def busy() -> tuple[WorkerProcess, WorkerProcess]:
        wait_for(
            lambda: (
                a.metric("lookaround_events_in_total") > 0
                and b.metric("lookaround_events_in_total") > 0
            ),
            timeout,
            "both workers busy",
        )
        return a, b

    return busy
