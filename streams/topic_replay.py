"""Replaying topics for evaluation: read a recorded fetched-page topic from the beginning, run it
through the embedded replay (same code, same run directory), and optionally check the
priorities topic against it.

Order: a single-partition topic is replayed in offset order, which is the crawler's order.
With several partitions the records are merged by their Kafka timestamp (then partition and
offset); per-page order is kept (a page's events share a partition), but the look-around
features depend on how the partitions interleave, so they can differ slightly from what the
live workers computed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from online.events import EventError, parse_fetch
from streams.kafka_io import kafka_python_options
from streams.reader import Batch, Reject
from streams.settings import Settings

#: Fields that legitimately differ between two runs of the same events.
VOLATILE_FIELDS = ("scored_at",)


def read_topic(
    settings: Settings, topic: str, *, idle_seconds: float = 1.0, timeout: float = 600.0
) -> list[Any]:
    """Every record of ``topic`` from the beginning up to its current end, ordered as
    described in the module docstring.

    The end is where the positions reach the end offsets seen at the start and a poll of
    ``idle_seconds`` brings nothing more (some brokers report end offsets loosely).
    """
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=5000,
        **kafka_python_options(settings),
    )
    try:
        parts = None
        deadline = time.monotonic() + 30
        while not parts and time.monotonic() < deadline:
            parts = consumer.partitions_for_topic(topic)
            if not parts:
                time.sleep(0.2)
        if not parts:
            raise ValueError(f"topic {topic} not found")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records: list[Any] = []
        quiet_since = time.monotonic()
        stop = time.monotonic() + timeout
        while time.monotonic() < stop:
            got = consumer.poll(timeout_ms=200)
            for msgs in got.values():
                records.extend(msgs)
            now = time.monotonic()
            if got:
                quiet_since = now
            elif now - quiet_since >= idle_seconds and all(
                consumer.position(tp) >= ends[tp] for tp in tps
            ):
                break
    finally:
        consumer.close()
    if len(tps) > 1:
        records.sort(key=lambda m: (m.timestamp, m.partition, m.offset))
    return records


def fetched_batches(
    records: Iterable[Any], settings: Settings, batch_size: int = 1000
) -> Iterator[Batch]:
    """Records of the fetched-page topic as the replay's batches (rejects keep their offset
    in ``line``)."""
    batch = Batch()
    n = 0
    for msg in records:
        n += 1
        batch.lines += 1
        raw = msg.value or b""
        try:
            batch.fetches.append(
                parse_fetch(
                    raw, embedding_dim=settings.embedding_dim, max_outlinks=settings.max_outlinks
                )
            )
        except EventError as err:
            text = raw[:1000].decode("utf-8", "replace").rstrip("\n")
            batch.rejects.append(Reject(msg.offset, err.field, err.reason, text))
        if len(batch.fetches) >= batch_size:
            batch.position = n
            yield batch
            batch = Batch()
    batch.position = n
    yield batch


def _comparable(priority: dict) -> tuple[tuple[str, str], dict]:
    doc = {k: v for k, v in priority.items() if k not in VOLATILE_FIELDS}
    return (priority["url"], priority["fetched_at"]), doc


@dataclass
class PriorityCheck:
    """How the published priorities compare with a replay's."""

    published: int = 0
    unique: int = 0
    expected: int = 0
    matching: int = 0
    redelivered: int = 0
    missing: list[tuple[str, str]] = field(default_factory=list)
    extra: list[tuple[str, str]] = field(default_factory=list)
    different: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.different)

    def as_dict(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "unique": self.unique,
            "expected": self.expected,
            "matching": self.matching,
            "redelivered": self.redelivered,
            "missing": len(self.missing),
            "extra": len(self.extra),
            "different": len(self.different),
            "ok": self.ok,
            "examples": {
                "missing": self.missing[:5],
                "extra": self.extra[:5],
                "different": self.different[:5],
            },
        }


def compare_priorities(published: Iterable[dict], expected: Iterable[dict]) -> PriorityCheck:
    """Match published updates to a replay's by (url, fetched_at), all fields but scored_at.

    An update published twice (a batch replayed after a crash) counts once if both copies are
    equal; a copy that differs counts as different.
    """
    check = PriorityCheck()
    want = dict(_comparable(p) for p in expected)
    check.expected = len(want)
    got: dict[tuple[str, str], dict] = {}
    for p in published:
        check.published += 1
        key, doc = _comparable(p)
        if key in got:
            check.redelivered += 1
            if got[key] != doc and key not in check.different:
                check.different.append(key)
            continue
        got[key] = doc
    check.unique = len(got)
    for key, doc in got.items():
        if key not in want:
            check.extra.append(key)
        elif want[key] != doc:
            if key not in check.different:
                check.different.append(key)
        else:
            check.matching += 1
    check.missing = [k for k in want if k not in got]
    return check


def published_priorities(settings: Settings, **kwargs: Any) -> list[dict]:
    records = read_topic(settings, settings.topic_priorities, **kwargs)
    return [orjson.loads(m.value) for m in records]


def replay_topic(
    settings: Settings,
    out_dir: Path,
    *,
    check_priorities: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Replay the fetched-page topic into ``out_dir``; with ``check_priorities`` also compare
    the priorities topic with the replay's priorities. Returns a summary dict."""
    from streams.pipeline import PipelineConfig
    from streams.replay import read_priorities, replay

    records = read_topic(settings, settings.topic_fetched)
    config = PipelineConfig(
        history=settings.history,
        neighbours=settings.neighbours,
        embedding_dim=settings.embedding_dim,
    )
    summary = replay(
        Path(f"kafka:{settings.topic_fetched}"),
        out_dir,
        scorer=settings.scorer,
        config=config,
        max_outlinks=settings.max_outlinks,
        progress=progress,
        batches=fetched_batches(records, settings),
    )
    result: dict[str, Any] = {"records": len(records), "replay": summary}
    if check_priorities:
        check = compare_priorities(published_priorities(settings), read_priorities(out_dir))
        result["priorities"] = check
    return result
