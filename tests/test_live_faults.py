"""Live faults that must not stop or fool a worker (issue 15, items 3 and 6), through a real
broker (Tansu), real Redis and real `lookaround worker` processes.

* garbage on the embeddings topic (malformed, another dimension, not finite) is skipped and
  counted, never fatal; vectors of another ``embedding_dim`` are named at start;
* the broker gone: /health turns 503 within ``health_broker_seconds``, the log stays short
  (state changes and reminders, not a line per attempt), SIGTERM stops the worker in < 10 s.
"""

from __future__ import annotations

import base64
import signal
import subprocess
import time

import numpy as np
import orjson
import pytest

pytest.importorskip("redis")

from online.links import link_info
from streams.harness import wait_for, worker_settings
from streams.kafka_io import (
    embedding_message,
    ensure_topics,
    free_port,
    kafka_python_options,
    start_tansu,
)
from streams.redis_store import RedisPageStore

pytestmark = pytest.mark.timeout(300)


def _send(settings, topic: str, values: list[bytes], keys: list[bytes | None]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(linger_ms=5, **kafka_python_options(settings))
    for key, value in zip(keys, values, strict=True):
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()


def _events(n: int, host: str = "ok.example") -> tuple[list[bytes], list[bytes], list[str]]:
    urls = [f"https://{host}/p{i}" for i in range(n)]
    lines = [
        orjson.dumps({"url": u, "fetched_at": 1_700_000_000 + i, "outlinks": [f"{u}/a"]})
        for i, u in enumerate(urls)
    ]
    return lines, [u.encode() for u in urls], urls


def _samples(worker, name: str) -> dict[str, float]:
    """A metric's samples by their label text."""
    _, body = worker.get("/metrics")
    out = {}
    for line in body.decode().splitlines():
        if line.startswith(name + "{"):
            head, _, value = line.rpartition(" ")
            out[head[len(name) :]] = float(value)
    return out


def test_garbage_on_the_embeddings_topic_is_skipped_and_counted(
    broker, redis_client, prefix, workers
):
    settings = worker_settings(broker, prefix, batch_size=20)
    ensure_topics(settings)
    dim = settings.embedding_dim
    url = "https://ok.example/p1"
    pid = link_info(url).page_id
    nan = np.full(dim, np.nan, np.float32)
    garbage = [
        # what a deployment with embedding_dim 5 left on the topic: the worker of issue 15
        # crash-looped on these ("expected vectors of shape (n, 192), got (1, 5)")
        *(embedding_message(pid + k, url, 1.0, np.ones(5, np.float32)) for k in range(3)),
        b"{not json",
        b"[1, 2]",
        orjson.dumps({"page_id": "x", "url": url, "ts": 1, "vector": ""}),
        orjson.dumps({"page_id": pid, "url": url, "ts": 1, "vector": "***"}),
        orjson.dumps({"page_id": pid, "url": url, "ts": 1e999, "vector": ""}),
        embedding_message(pid, url, 1.0, nan),
        orjson.dumps(
            {"page_id": pid, "url": url, "ts": 1.0, "vector": base64.b64encode(b"abc").decode()}
        ),
    ]
    _send(settings, settings.topic_embeddings, garbage, [str(pid).encode()] * len(garbage))
    lines, keys, urls = _events(30)
    _send(settings, settings.topic_fetched, lines, keys)
    w = workers(settings)
    w.wait_healthy()
    store = RedisPageStore(redis_client, prefix=settings.redis_key_prefix)
    wait_for(lambda: all(s is not None for s in store.get_states(urls)), 60, "good events", w)
    assert w.health()[0] == 200 and w.alive()
    rejected = _samples(w, "lookaround_embeddings_rejected_total")
    assert rejected == {
        '{reason="dimension"}': 3.0,
        '{reason="malformed"}': 6.0,
        '{reason="not_finite"}': 1.0,
    }
    assert w.health()[1]["embeddings_rejected"] == {"dimension": 3, "malformed": 6, "not_finite": 1}
    log = w.log.read_text()
    assert "embedding_dim changed? The embeddings topic" in log
    assert "3 of dimension 5" in log and f"its embedding_dim is {dim}" in log
    # one line per reason (the rest within the minute are counted, not logged)
    assert log.count("embeddings message skipped") == 3
    assert w.metric("lookaround_priorities_out_total") == len(lines)


def test_broker_gone_health_503_bounded_logs_and_prompt_stop(
    redis_client, prefix, workers, tmp_path
):
    port = free_port()
    tansu = start_tansu(port, tmp_path / "tansu.log")
    try:
        settings = worker_settings(
            f"127.0.0.1:{port}", prefix, batch_size=20, health_broker_seconds=5.0
        )
        ensure_topics(settings)
        lines, keys, _ = _events(40)
        _send(settings, settings.topic_fetched, lines, keys)
        w = workers(settings)
        w.wait_healthy()
        wait_for(lambda: w.metric("lookaround_priorities_out_total") >= len(lines), 60, "all", w)
        assert w.health()[1]["broker"] is True
        before = len(w.log.read_bytes())
    finally:
        tansu.kill()
        tansu.wait()
    gone = time.monotonic()
    wait_for(lambda: w.health()[0] == 503, 20, "/health 503 with the broker gone", w)
    took = time.monotonic() - gone
    status, body = w.health()
    assert status == 503 and body["broker"] is False and body["redis"] is True
    assert any("broker unreachable" in p for p in body["problems"])
    assert took < 5.0 + 10.0, f"/health noticed after {took:.1f} s"
    time.sleep(max(0.0, 30.0 - (time.monotonic() - gone)))  # half a minute of outage
    after = w.log.read_bytes()[before:].decode("utf-8", "replace").splitlines()
    noisy = [line for line in after if "ERROR" in line or "WARNING" in line]
    assert 1 <= len(noisy) <= 40, f"{len(noisy)} lines in 30 s:\n" + "\n".join(noisy[-20:])
    assert sum("broker unreachable" in line for line in after) == 1  # the state change once
    started = time.monotonic()
    w.proc.send_signal(signal.SIGTERM)
    try:
        w.proc.wait(15)
    except subprocess.TimeoutExpired:
        pytest.fail("the worker did not stop within 15 s of SIGTERM with the broker gone")
    stopped = time.monotonic() - started
    assert stopped < 10.0, f"stopped {stopped:.1f} s after SIGTERM"
