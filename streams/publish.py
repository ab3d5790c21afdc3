"""Publishing fetched-page events to Kafka from a crawler: keyed by URL, acknowledged by the
broker, retried, counted, never silently lost.

`EventPublisher` wraps a kafka-python producer (acks from every in-sync replica, the client's
idempotent retries within ``delivery_timeout_seconds``). A send that still fails (the broker
unreachable for longer, the topic missing...) is sent again after a backoff that doubles, up
to ``retries`` times; one that fails every time is written to the spool file (JSON Lines, the
events as they were: publish them again with ``lookaround produce SPOOL``) and counted as
failed. Whatever happens, ``sent == published + failed + pending``, and `EventPublisher.close`
leaves nothing pending: what was not delivered by then is spooled.

The Scrapy integration (`streams.crawlers.scrapy`) and ``lookaround import-warc --produce``
publish through it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from online.links import InvalidURL, link_info
from streams.kafka_io import kafka_python_options
from streams.settings import Settings

log = logging.getLogger("lookaround.publish")


@dataclass(frozen=True)
class PublishCounts:
    """Events handed to the publisher, delivered, sent again, given up on (spooled), and not
    settled yet."""

    sent: int
    published: int
    retried: int
    failed: int
    pending: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def event_key(event: dict[str, Any]) -> bytes | None:
    """The message key of an event: its normalised URL (None if it has none: the worker
    rejects such an event to the dead-letter topic, with its reason)."""
    url = event.get("url")
    try:
        return link_info(url).url.encode() if isinstance(url, str) else None
    except InvalidURL:
        return None


class EventPublisher:
    """Publishes events to ``topic`` (default: the fetched-page topic of ``settings``).

    ``producer_factory(**options)`` makes the kafka-python producer (a test may pass its own);
    it is made on the first send and made again after a failure to connect.
    """

    def __init__(
        self,
        settings: Settings,
        topic: str | None = None,
        *,
        retries: int = 5,
        backoff_seconds: float = 1.0,
        delivery_timeout_seconds: float = 30.0,
        spool: Path | None = None,
        producer_factory: Callable[..., Any] | None = None,
        linger_ms: int = 5,
    ) -> None:
        self.settings = settings
        self.topic = topic or settings.topic_fetched
        self.retries = retries
        self.backoff_seconds = backoff_seconds
        self.delivery_timeout_seconds = delivery_timeout_seconds
        self.spool = spool
        self.linger_ms = linger_ms
        self._factory = producer_factory
        self._producer: Any = None
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._retry_heap: list[tuple[float, int, bytes | None, bytes, int]] = []
        self._seq = itertools.count()
        self._closed = False
        self._sent = self._published = self._retried = self._failed = 0
        self._thread = threading.Thread(target=self._retry_loop, name="publish-retry", daemon=True)
        self._thread.start()

    # -- sending --------------------------------------------------------------------------------

    def publish(self, event: dict[str, Any]) -> None:
        """Publish one event (a JSON-ready dict), keyed by its URL."""
        self.send(event_key(event), orjson.dumps(event))

    def send(self, key: bytes | None, value: bytes) -> None:
        """Publish one message as it is. Never blocks on a broker that cannot be reached: until
        a producer is connected, messages wait for the retry thread, which connects."""
        with self._wake:
            if self._closed:
                raise RuntimeError("publisher is closed")
            self._sent += 1
            producer = self._producer
            if producer is None:
                self._queue(key, value, 0, time.monotonic())
                return
        self._send_with(producer, key, value, 0)

    def _send_with(self, producer: Any, key: bytes | None, value: bytes, attempt: int) -> None:
        try:
            future = producer.send(self.topic, key=key, value=value)
        except Exception as exc:  # buffer full past max_block, closed producer
            self._failed_attempt(key, value, attempt, exc)
            return
        future.add_callback(self._delivered)
        future.add_errback(lambda exc: self._failed_attempt(key, value, attempt, exc))

    def _queue(self, key: bytes | None, value: bytes, attempt: int, due: float) -> None:
        """Hand a message to the retry thread (called with the lock held)."""
        heapq.heappush(self._retry_heap, (due, next(self._seq), key, value, attempt))
        self._wake.notify()

    def _get_producer(self) -> Any:
        with self._lock:
            if self._producer is None:
                self._producer = self._make_producer()
            return self._producer

    def _make_producer(self) -> Any:
        factory = self._factory
        if factory is None:
            from kafka import KafkaProducer

            factory = KafkaProducer
        timeout_ms = int(self.delivery_timeout_seconds * 1000)
        return factory(
            acks="all",
            linger_ms=self.linger_ms,
            delivery_timeout_ms=timeout_ms,
            request_timeout_ms=max(1_000, min(30_000, timeout_ms // 2)),
            max_block_ms=timeout_ms,
            **kafka_python_options(self.settings),
        )

    def _delivered(self, _metadata: Any) -> None:
        with self._lock:
            self._published += 1

    def _failed_attempt(self, key: bytes | None, value: bytes, attempt: int, exc: Any) -> None:
        with self._wake:
            if attempt >= self.retries or self._closed:
                self._failed += 1
                self._spool([value])
                log.error(
                    "event not delivered after %d attempts, spooled: %s (%s)",
                    attempt + 1,
                    key.decode("utf-8", "replace") if key else None,
                    exc,
                )
                return
            due = time.monotonic() + self.backoff_seconds * 2**attempt
            self._queue(key, value, attempt + 1, due)
        log.warning("event delivery failed (attempt %d), will retry: %s", attempt + 1, exc)

    def _retry_loop(self) -> None:
        while True:
            with self._wake:
                while not self._retry_heap and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                due, _, key, value, attempt = self._retry_heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._retry_heap)
                if attempt:
                    self._retried += 1
            try:
                producer = self._get_producer()
            except Exception as exc:  # no broker yet: this attempt failed
                self._failed_attempt(key, value, attempt, exc)
                continue
            self._send_with(producer, key, value, attempt)

    # -- state and shutdown ---------------------------------------------------------------------

    @property
    def counts(self) -> PublishCounts:
        with self._lock:
            return PublishCounts(
                sent=self._sent,
                published=self._published,
                retried=self._retried,
                failed=self._failed,
                pending=self._sent - self._published - self._failed,
            )

    def flush(self, timeout: float = 30.0) -> PublishCounts:
        """Wait up to ``timeout`` seconds until every event sent so far is settled."""
        deadline = time.monotonic() + timeout
        while self.counts.pending and time.monotonic() < deadline:
            producer = self._producer
            if producer is not None:
                with contextlib.suppress(Exception):  # a flush that times out: go on waiting
                    producer.flush(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            else:
                time.sleep(0.05)
        return self.counts

    def close(self, timeout: float = 30.0) -> PublishCounts:
        """Flush, then spool whatever is still not delivered; the final counts."""
        self.flush(timeout)
        with self._wake:
            self._closed = True
            left = [value for _, _, _, value, _ in self._retry_heap]
            self._retry_heap.clear()
            self._failed += len(left)
            self._spool(left)
            self._wake.notify_all()
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.close(timeout=max(1.0, timeout / 10))  # fails what is in flight: spooled
        self._thread.join(5)
        counts = self.counts
        if counts.pending:  # sends that never got an answer either way
            log.error("%d events unsettled at close", counts.pending)
        return counts

    def _spool(self, values: list[bytes]) -> None:
        """Append undelivered events to the spool file (called with the lock held)."""
        if not values:
            return
        if self.spool is None:
            log.error("%d undelivered events and no spool file: logged here", len(values))
            for value in values:
                log.error("undelivered event: %s", value.decode("utf-8", "replace"))
            return
        self.spool.parent.mkdir(parents=True, exist_ok=True)
        with open(self.spool, "ab") as fh:
            for value in values:
                fh.write(value.rstrip(b"\n") + b"\n")
