"""Replaying topics for evaluation: read a recorded fetched-page topic from the beginning, run it
through the embedded replay (same code, same run directory), and optionally check the
priorities topic against it.

Order. A page's priority depends on the events before it in the stream, not only its own: the
related pages indexed so far (a newcomer among few indexed pages takes its prior from whatever
is there), their stats, and the online learner, which learns every label in stream order. With
several partitions a worker takes the partitions' records in whatever interleaving the broker
delivers, which is neither the crawler's order nor anything the topic's timestamps record
(a crawler publishing fast gives hundreds of records the same millisecond). So every priority a
worker publishes carries its place in the worker's processing order and its source record
(`streams.kafka_io.processing_headers`), and the records are replayed:

* **recorded** order: as the worker took them, when one worker at a time published the
  priorities (a worker, or a worker restarted): the replay then computes exactly what the
  worker did, every field of every priority (bound 0);
* **merged** order, when several workers ran at once: their batches merged by the time they
  were scored. Each worker has its own online learner and sees the other workers' pages only
  once written (Redis) and published (the embeddings replica): what it saw of them is
  recorded nowhere, so no replay can reproduce its scores. The check then holds each update's
  own fields (`OWN_FIELDS`: what the page's own events decide) to equality, every fetch to
  exactly one update, and reports how the scores compare (Spearman's rank correlation; two
  workers on 8 partitions of a 300-page crawl gave 0.82 to 0.94, of a 2,000-page crawl 0.99);
* **timestamp** order, without recorded places (priorities published by something else, or
  gone from the topic): by Kafka timestamp, then partition and offset; checked as merged.

Records without a place of their own (rejects, duplicates, stale events: nothing is published
for them, and they change nothing) follow the record before them in their partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from scipy.stats import spearmanr

from batch.reader import DEFAULT_BATCH_SIZE, Batch, Reject
from online.errors import InputError
from online.events import EventError
from online.fetch import parse_fetch
from streams.composition import pipeline_config
from streams.kafka_io import kafka_python_options, parse_processing_headers
from streams.replay import read_priorities, read_related, replay
from streams.settings import Settings

#: Fields that legitimately differ between two runs of the same events.
VOLATILE_FIELDS = ("scored_at",)


def wait_for_workers(
    settings: Settings,
    timeout: float,
    report: Callable[[int], None] = lambda behind: None,
    *,
    stall: float = 20.0,
    every: float = 5.0,
) -> int:
    """Wait until the workers' consumer group has committed every record of the fetched-page
    topic (its priorities are then published), for at most ``timeout`` seconds, or until it
    made no progress for ``stall`` seconds (no worker running?). Returns how many records it
    is still behind; ``report(behind)`` is called every ``every`` seconds while waiting."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    options = kafka_python_options(settings)
    admin = KafkaAdminClient(**options)
    consumer = KafkaConsumer(**options)
    try:
        topic = settings.topic_fetched
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = consumer.end_offsets(tps) if tps else {}
        started = last_change = last_report = time.monotonic()
        previous = None
        while True:
            committed = _committed_offsets(admin, settings.app_id)
            done = {tp: max(committed[tp].offset, 0) for tp in tps if tp in committed}
            behind = sum(max(ends[tp] - done.get(tp, 0), 0) for tp in tps)
            now = time.monotonic()
            if behind != previous:
                previous, last_change = behind, now
            if not behind or now - started >= timeout or now - last_change >= stall:
                return behind
            if now - last_report >= every:
                report(behind)
                last_report = now
            time.sleep(0.25)
    finally:
        consumer.close()
        admin.close()


def _committed_offsets(admin: Any, group: str) -> dict:
    """{TopicPartition: OffsetAndMetadata} a consumer group has committed (kafka-python 3's
    ``list_group_offsets``, or 2's ``list_consumer_group_offsets``)."""
    if hasattr(admin, "list_group_offsets"):
        return admin.list_group_offsets({group: None}).get(group, {})
    return admin.list_consumer_group_offsets(group)


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
            raise InputError(
                f"no topic {topic!r} on {settings.kafka_bootstrap}: `lookaround topics` creates "
                "the pipeline's topics (LOOKAROUND_TOPIC_* name them)"
            )
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
    return _by_timestamp(records) if len(tps) > 1 else records


@dataclass(frozen=True)
class ReplayOrder:
    """How a topic's records were ordered for the replay (see the module docstring)."""

    mode: str  # "recorded", "merged" or "timestamp"
    runs: int = 0  # worker runs that published the priorities
    placed: int = 0  # fetched records with a recorded place

    @property
    def exact(self) -> bool:
        """The replay can reproduce the workers' priorities exactly."""
        return self.mode == "recorded"


def processing_order(fetched: list[Any], priorities: list[Any]) -> tuple[list[Any], ReplayOrder]:
    """The fetched-page records in the order the workers processed them, as their priority
    messages record it (``priorities``: records of the priorities topic, with headers)."""
    places: dict[tuple[int, int], tuple[int, int]] = {}
    scored: dict[tuple[int, int], float] = {}
    spans: dict[int, list[float]] = {}
    unplaced = 0
    for msg in priorities:
        parsed = parse_processing_headers(getattr(msg, "headers", None))
        if parsed is None:
            unplaced += 1
            continue
        place, source = parsed
        at = _scored_at(msg.value)
        span = spans.setdefault(place[0], [at, at])
        span[0], span[1] = min(span[0], at), max(span[1], at)
        if source not in places or place > places[source]:  # redelivered: the last one counts
            places[source], scored[source] = place, at
    if not places:
        return _by_timestamp(fetched), ReplayOrder("timestamp")
    starts = sorted(spans.items())
    overlap = any(later[1][0] < earlier[1][1] for earlier, later in pairwise(starts))
    mode = "merged" if overlap or unplaced else "recorded"

    def place_key(source: tuple[int, int]) -> tuple:
        run, sequence = places[source]
        return (scored[source], run, sequence) if mode == "merged" else (run, sequence)

    keyed = []
    previous: dict[int, tuple] = {}
    for msg in sorted(fetched, key=lambda m: (m.partition, m.offset)):
        source = (msg.partition, msg.offset)
        if source in places:
            key = previous[msg.partition] = place_key(source)
            keyed.append(((key, 0, 0, msg.partition, msg.offset), msg))
        else:  # after the record before it in its partition (first ones: by timestamp)
            key = previous.get(msg.partition, ())
            keyed.append(((key, 1, msg.timestamp, msg.partition, msg.offset), msg))
    keyed.sort(key=lambda item: item[0])
    order = ReplayOrder(mode, runs=len(spans), placed=len(places))
    return [msg for _, msg in keyed], order


def _scored_at(value: bytes) -> float:
    try:
        text = orjson.loads(value)["scored_at"]
        return datetime.fromisoformat(text).timestamp()
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return 0.0


def _by_timestamp(records: list[Any]) -> list[Any]:
    return sorted(records, key=lambda m: (m.timestamp, m.partition, m.offset))


def fetched_batches(
    records: Iterable[Any], settings: Settings, batch_size: int = DEFAULT_BATCH_SIZE
) -> Iterator[Batch]:
    """Records of the fetched-page topic as the replay's batches (rejects keep their offset
    in ``line``)."""
    batch = Batch()
    n = 0
    limits = settings.event_limits()
    for msg in records:
        n += 1
        batch.lines += 1
        raw = msg.value or b""
        try:
            batch.fetches.append(
                parse_fetch(
                    raw,
                    embedding_dim=settings.embedding_dim,
                    max_outlinks=settings.max_outlinks,
                    limits=limits,
                )
            )
            batch.numbers.append(msg.offset)
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


#: Fields of a priority that only the page's own event decides: equal in any order.
OWN_FIELDS = ("url", "fetched_at", "status", "crawl")


@dataclass
class PriorityCheck:
    """How the published priorities compare with a replay's."""

    published: int = 0
    unique: int = 0
    expected: int = 0
    matching: int = 0
    redelivered: int = 0
    #: every field compared (a recorded order), or only the own fields (`OWN_FIELDS`)
    exact: bool = True
    rank_correlation: float | None = None
    missing: list[tuple[str, str]] = field(default_factory=list)
    extra: list[tuple[str, str]] = field(default_factory=list)
    different: list[tuple[str, str]] = field(default_factory=list)
    #: keys whose own fields differ (never allowed, bound or not)
    own_different: list[tuple[str, str]] = field(default_factory=list)
    #: keys published again with other values (a batch redone after a crash, its partitions
    #: interleaved otherwise): the later copy is the one compared, and the one a crawler keeps
    superseded: list[tuple[str, str]] = field(default_factory=list)
    #: related updates (`online.related_updates`): distinct ones published, the replay's, and
    #: those equal in every field but scored_at (checked where every field is)
    related_published: int = 0
    related_expected: int = 0
    related_matching: int = 0

    @property
    def ok(self) -> bool:
        if self.missing or self.extra or self.own_different:
            return False
        if self.exact and not (
            self.related_published == self.related_expected == self.related_matching
        ):
            return False
        return not (self.exact and self.different)

    def as_dict(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "unique": self.unique,
            "expected": self.expected,
            "matching": self.matching,
            "redelivered": self.redelivered,
            "superseded": len(self.superseded),
            "missing": len(self.missing),
            "extra": len(self.extra),
            "different": len(self.different),
            "compared": "every field" if self.exact else "own fields",
            "own_different": len(self.own_different),
            "rank_correlation": self.rank_correlation,
            "related": {
                "published": self.related_published,
                "expected": self.related_expected,
                "matching": self.related_matching,
            },
            "ok": self.ok,
            "examples": {
                "missing": self.missing[:5],
                "extra": self.extra[:5],
                "different": self.different[:5],
                "superseded": self.superseded[:5],
            },
        }


def compare_priorities(
    published: Iterable[dict], expected: Iterable[dict], *, exact: bool = True
) -> PriorityCheck:
    """Match published updates to a replay's by (url, fetched_at), all fields but scored_at.

    ``exact``: every field must be equal; else only the own fields (`OWN_FIELDS`), and how
    the scores compare is reported (``different``, ``rank_correlation``). Every update must
    be there, once: an update published twice counts once, as its last copy (a crawler
    applies them in order, so the last one stands); earlier copies that differ are counted as
    superseded.
    """
    check = PriorityCheck(exact=exact)
    want = dict(_comparable(p) for p in expected)
    check.expected = len(want)
    got: dict[tuple[str, str], dict] = {}
    for p in published:
        check.published += 1
        key, doc = _comparable(p)
        if key in got:
            check.redelivered += 1
            if got[key] != doc and key not in check.superseded:
                check.superseded.append(key)
        got[key] = doc
    check.unique = len(got)
    pairs: list[tuple[float, float]] = []
    for key, doc in got.items():
        if key not in want:
            check.extra.append(key)
            continue
        other = want[key]
        if any(doc.get(f) != other.get(f) for f in OWN_FIELDS):
            check.own_different.append(key)
        if other != doc:
            check.different.append(key)
        else:
            check.matching += 1
        pairs.append((doc.get("score") or 0.0, other.get("score") or 0.0))
    check.missing = [k for k in want if k not in got]
    check.rank_correlation = _rank_correlation(pairs)
    return check


def compare_related(
    check: PriorityCheck, published: Iterable[dict], expected: Iterable[dict]
) -> None:
    """Count the related updates published and the replay's into ``check``: each keyed by the
    sibling and the fetch that announced it, the last copy of a key counting."""

    def keyed(updates: Iterable[dict]) -> dict[tuple, dict]:
        out = {}
        for u in updates:
            cause = u.get("related_to") or {}
            doc = {k: v for k, v in u.items() if k not in VOLATILE_FIELDS}
            out[(u.get("url"), cause.get("url"), cause.get("fetched_at"))] = doc
        return out

    got, want = keyed(published), keyed(expected)
    check.related_published, check.related_expected = len(got), len(want)
    check.related_matching = sum(1 for key, doc in got.items() if want.get(key) == doc)


def is_related(priority: dict) -> bool:
    """A related update (`online.related_updates`), not a fetch's own priority."""
    return priority.get("kind") == "related"


def _rank_correlation(pairs: list[tuple[float, float]]) -> float | None:
    """Spearman's correlation of the pairs' two sides (1.0 where both are the same)."""
    if not pairs:
        return None
    a, b = (np.array(side, dtype=np.float64) for side in zip(*pairs, strict=True))
    if np.array_equal(a, b):
        return 1.0
    rho = spearmanr(a, b).statistic
    return round(float(rho), 6) if np.isfinite(rho) else 0.0


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
    """Replay the fetched-page topic into ``out_dir`` in the workers' order (module docstring);
    with ``check_priorities`` also compare the priorities topic with the replay's priorities.
    Returns a summary dict: ``records``, ``order`` (a `ReplayOrder`), ``replay`` (the
    `ReplaySummary`) and, when checked, ``priorities`` (a `PriorityCheck`)."""

    fetched = read_topic(settings, settings.topic_fetched)
    published, related = [], []
    for msg in read_topic(settings, settings.topic_priorities):
        value = orjson.loads(msg.value)
        (related if is_related(value) else published).append((msg, value))
    records, order = processing_order(fetched, [msg for msg, _ in published])
    config = pipeline_config(settings)  # the workers' own: a budget's schedule included
    summary = replay(
        Path(f"kafka:{settings.topic_fetched}"),
        out_dir,
        scorer=settings.scorer,
        config=config,
        max_outlinks=settings.max_outlinks,
        progress=progress,
        batches=fetched_batches(records, settings),
    )
    result: dict[str, Any] = {"records": len(records), "order": order, "replay": summary}
    if check_priorities:
        check = compare_priorities(
            (value for _, value in published), read_priorities(out_dir), exact=order.exact
        )
        compare_related(check, (value for _, value in related), read_related(out_dir))
        result["priorities"] = check
    return result
