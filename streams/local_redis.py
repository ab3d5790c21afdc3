"""A Redis Cluster on this machine, for tests and benchmarks: ``redis-server`` processes with
``--cluster-enabled yes`` on free ports, joined by ``redis-cli --cluster create``.

Masters and their replicas keep nothing on disk unless asked (``appendonly``: the test that
stops the whole cluster and starts it again needs what was written to survive). Each node is
a child process of ours, so a test can kill one outright (SIGKILL: a master failing) and start
it again with the same node identity (its ``nodes-PORT.conf``), as a restarted pod would be.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

#: A cluster node also listens on its port + this offset (the cluster bus).
BUS_OFFSET = 10_000


class ClusterUnavailable(RuntimeError):
    """``redis-server`` or ``redis-cli`` is missing, or the cluster did not come up."""


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(n: int) -> list[int]:
    """``n`` free ports whose cluster-bus ports (port + 10,000) are free too."""
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + BUS_OFFSET < 65_536 and port not in ports and _port_free(port + BUS_OFFSET):
            ports.append(port)
    return ports


def _cli(*args: str, timeout: float = 10.0) -> str:
    out = subprocess.run(
        ["redis-cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    return out.stdout + out.stderr


@dataclass
class LocalRedisCluster:
    """``masters`` masters with ``replicas`` replicas each, under ``workdir``."""

    workdir: Path
    masters: int = 3
    replicas: int = 1
    appendonly: bool = False
    node_timeout_ms: int = 2000
    ports: list[int] = field(default_factory=list)
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """A redis:// URL of one node: clients discover the rest (`streams.redis_store`)."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self, timeout: float = 60.0) -> LocalRedisCluster:
        if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
            raise ClusterUnavailable("redis-server and redis-cli are needed for a local cluster")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ports = free_cluster_ports(self.masters * (1 + self.replicas))
        for port in self.ports:
            self.start_node(port)
        for port in self.ports:
            self._wait_ping(port, 10.0)
        created = _cli(
            "--cluster",
            "create",
            *(f"127.0.0.1:{p}" for p in self.ports),
            "--cluster-replicas",
            str(self.replicas),
            "--cluster-yes",
            timeout=timeout,
        )
        if "[OK] All 16384 slots covered" not in created:
            self.stop()
            raise ClusterUnavailable(f"redis-cli --cluster create failed:\n{created[-2000:]}")
        self.wait_ok(timeout)
        return self

    def start_node(self, port: int) -> None:
        """Start (or start again) the node of ``port``, with its node identity."""
        log = open(self.workdir / f"redis-{port}.log", "ab")  # noqa: SIM115
        cmd = [
            "redis-server",
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(self.workdir / f"nodes-{port}.conf"),
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--dir", str(self.workdir),
            "--dbfilename", f"dump-{port}.rdb",
            "--appendfilename", f"appendonly-{port}.aof",
            "--appenddirname", f"aof-{port}",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            "--daemonize", "no",
        ]  # fmt: skip
        self.procs[port] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def _wait_ping(self, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "PONG" in _cli("-p", str(port), "ping", timeout=2.0):
                return
            time.sleep(0.05)
        raise ClusterUnavailable(f"redis node {port} did not start (see its log in {self.workdir})")

    def info(self, port: int, section: str) -> dict[str, str]:
        """``INFO section`` of a node (``cluster``: ``CLUSTER INFO``), as a dict."""
        args = ("cluster", "info") if section == "cluster" else ("info", section)
        out = _cli("-p", str(port), *args, timeout=2.0)
        pairs = (line.split(":", 1) for line in out.splitlines() if ":" in line)
        return {k.strip(): v.strip() for k, v in pairs}

    def role(self, port: int) -> str:
        """``master``, ``slave`` or "" (a node that does not answer)."""
        return self.info(port, "replication").get("role", "")

    def master_ports(self) -> list[int]:
        return [p for p in self.ports if self.alive(p) and self.role(p) == "master"]

    def alive(self, port: int) -> bool:
        proc = self.procs.get(port)
        return proc is not None and proc.poll() is None

    def wait_ok(self, timeout: float = 60.0, masters: int | None = None) -> None:
        """Until every live node says ``cluster_state:ok`` and (by default) ``masters`` nodes are
        masters with a replica each in sync."""
        masters = self.masters if masters is None else masters
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [p for p in self.ports if self.alive(p)]
            states = [self.info(p, "cluster").get("cluster_state") for p in live]
            if live and all(s == "ok" for s in states) and len(self.master_ports()) == masters:
                return
            time.sleep(0.1)
        raise ClusterUnavailable(f"the cluster did not reach cluster_state:ok in {timeout}s")

    def wait_replicas_synced(self, timeout: float = 60.0) -> None:
        """Until every master has ``replicas`` replicas online."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            counts = [
                int(self.info(p, "replication").get("connected_slaves", "0"))
                for p in self.master_ports()
            ]
            if counts and all(c >= self.replicas for c in counts):
                return
            time.sleep(0.1)
        raise ClusterUnavailable(f"replicas did not come back in {timeout}s")

    def kill(self, port: int) -> None:
        """SIGKILL the node of ``port``: no goodbye, whatever it had not replicated is lost."""
        proc = self.procs.get(port)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def shutdown(self, port: int) -> None:
        """Stop the node of ``port`` as an operator would (SHUTDOWN: AOF flushed, if kept)."""
        _cli("-p", str(port), "shutdown", timeout=10.0)
        proc = self.procs.get(port)
        if proc is not None:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill(port)

    def stop(self) -> None:
        for port in list(self.procs):
            self.kill(port)
        self.procs.clear()

    def __enter__(self) -> LocalRedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.stop()
