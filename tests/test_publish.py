"""Publishing a crawler's events (streams/publish.py) against real Tansu brokers: delivered and
keyed by URL; a broker that is not there yet is waited for with retries; one that never comes
leaves every event in the spool file, counted, none lost."""

from __future__ import annotations

import subprocess
import time

import orjson
import pytest

from streams.harness import worker_settings
from streams.kafka_io import ensure_topics, free_port, start_tansu
from streams.publish import EventPublisher, event_key
from streams.topic_replay import read_topic

pytestmark = pytest.mark.timeout(180)


def events(n: int) -> list[dict]:
    return [
        {"url": f"HTTPS://A.org/p{i}#x", "fetched_at": 1_772_409_600 + i, "outlinks": []}
        for i in range(n)
    ]


def test_delivered_and_keyed_by_url(broker, tmp_path):
    settings = worker_settings(broker, f"pub{tmp_path.name[-8:]}")
    ensure_topics(settings)
    publisher = EventPublisher(settings, spool=tmp_path / "spool.jsonl")
    for event in events(30):
        publisher.publish(event)
    counts = publisher.close()
    assert (counts.sent, counts.published, counts.failed, counts.pending) == (30, 30, 0, 0)
    messages = read_topic(settings, settings.topic_fetched)
    assert [m.key for m in messages] == [f"https://a.org/p{i}".encode() for i in range(30)]
    assert orjson.loads(messages[0].value) == events(1)[0]  # the event as it was sent
    assert not (tmp_path / "spool.jsonl").exists()
    assert event_key({"url": "not a url"}) is None and event_key({}) is None


def test_a_broker_that_comes_late_gets_every_event(tmp_path):
    port = free_port()
    settings = worker_settings(f"127.0.0.1:{port}", f"late{tmp_path.name[-8:]}")
    publisher = EventPublisher(
        settings, retries=8, backoff_seconds=0.25, spool=tmp_path / "spool.jsonl"
    )
    for event in events(5):
        publisher.publish(event)  # never blocks, though no broker listens yet
    time.sleep(1.5)
    assert publisher.counts.published == 0 and publisher.counts.pending == 5
    proc = start_tansu(port, tmp_path / "tansu.log")
    try:
        ensure_topics(settings)
        counts = publisher.close(timeout=60)
        assert (counts.sent, counts.published, counts.failed, counts.pending) == (5, 5, 0, 0)
        assert counts.retried >= 1  # they waited for the broker
        assert len(read_topic(settings, settings.topic_fetched)) == 5
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert not (tmp_path / "spool.jsonl").exists()


def test_a_broker_that_never_comes_leaves_everything_in_the_spool(tmp_path):
    settings = worker_settings(f"127.0.0.1:{free_port()}", f"gone{tmp_path.name[-8:]}")
    spool = tmp_path / "undelivered.jsonl"
    publisher = EventPublisher(settings, retries=1, backoff_seconds=0.05, spool=spool)
    sent = events(3)
    for event in sent:
        publisher.publish(event)
    counts = publisher.close(timeout=30)
    assert (counts.sent, counts.published, counts.failed, counts.pending) == (3, 0, 3, 0)
    assert sorted(orjson.loads(line)["url"] for line in spool.read_text().splitlines()) == sorted(
        e["url"] for e in sent
    )
    with pytest.raises(RuntimeError, match="closed"):
        publisher.publish(sent[0])
