"""What /health concludes from the broker and the worker's progress, and bounded logs while a
fault lasts (`streams.health`, `streams.logs`). The live end to end (a real broker killed) is
tests/test_live_faults.py."""

from __future__ import annotations

import logging

from streams.health import HealthWatch
from streams.logs import RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_partition_with_lag_that_does_not_advance_is_a_stall(caplog) -> None:
    clock = Clock()
    w = HealthWatch(broker_seconds=10, stall_seconds=60, clock=clock)
    high = {("t", 0): 100, ("t", 1): 50}
    w.events_read()
    w.committed({("t", 0): 10, ("t", 1): 49}, lambda t, p: high[(t, p)])
    w.idle()
    assert w.partitions[("t", 0)][2] == 89 and w.partitions[("t", 1)][2] == 0
    clock.t = 59
    assert w.problems() == []
    clock.t = 61
    with caplog.at_level(logging.WARNING, logger="lookaround.worker"):
        assert w.problems() == ["t[0] has lag 89 and has not advanced for 61 s"]
        assert w.problems()  # still stalled: logged once
        w.committed({("t", 0): 99}, lambda t, p: high[(t, p)])
        assert w.problems() == []
    assert caplog.text.count("worker stalled") == 1
    assert caplog.text.count("worker moving again") == 1


def test_events_waiting_without_a_commit_is_a_stall() -> None:
    """A worker stuck on its first batch has no partition progress at all."""
    clock = Clock()
    w = HealthWatch(broker_seconds=10, stall_seconds=60, clock=clock)
    w.events_read()
    clock.t = 30
    w.events_read()  # more arrive: still waiting since 0
    clock.t = 60
    assert w.problems() == ["events waiting 60 s without a commit"]


def test_partitions_of_another_worker_after_a_rebalance_are_forgotten() -> None:
    clock = Clock()
    w = HealthWatch(broker_seconds=10, stall_seconds=60, clock=clock)
    w.committed({("t", 0): 1, ("t", 1): 1}, lambda t, p: 100)
    w.idle()
    clock.t = 100
    w.refresh_lag(lambda t, p: 100, assigned={("t", 0)})
    assert list(w.partitions) == [("t", 0)]
    assert len(w.problems()) == 1


def test_broker_outage_is_logged_once_then_reminded(caplog) -> None:
    clock = Clock()
    w = HealthWatch(broker_seconds=5, stall_seconds=60, clock=clock)
    with caplog.at_level(logging.WARNING, logger="lookaround.worker"):
        for second in range(0, 200, 2):  # a probe every 2 s for 200 s
            clock.t = second
            w.broker_failed("refused")
        assert w.broker_down() and w.problems()[0].startswith("broker unreachable for 198 s")
        w.broker_answered()
        assert not w.broker_down() and w.problems() == []
    lines = caplog.text.splitlines()
    assert sum("broker unreachable" in line for line in lines) == 4  # 6 s, then every 60 s
    assert sum("broker reachable again" in line for line in lines) == 1


def test_kafka_client_errors_are_throttled_per_message() -> None:
    clock = Clock()
    f = RepeatFilter(every=60, clock=clock)

    def record(name: str, msg: str, level: int = logging.ERROR) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, msg, ("127.0.0.1:9092",), None)

    passed = []
    for i in range(1000):  # 1,000 failed attempts over 100 s
        clock.t = i / 10
        passed += [r for r in (record("aiokafka", "Unable connect to %s"),) if f.filter(r)]
    assert len(passed) == 2
    assert "like it not logged" in passed[1].getMessage()
    assert f.filter(record("aiokafka", "another message"))
    assert f.filter(record("lookaround.worker", "ours are never throttled"))
    assert f.filter(record("lookaround.worker", "ours are never throttled"))
    assert f.filter(record("aiokafka", "Unable connect to %s", logging.INFO))
