"""Scrapy in lookaround's loop: every crawled response becomes a fetched-page event on Kafka,
and lookaround's priority updates come back as recrawl requests.

Install with ``pip install 'lookaround[scrapy]'`` and enable the two extensions in the Scrapy
project's ``settings.py`` (``examples/scrapy/`` is a complete project)::

    EXTENSIONS = {
        "streams.crawlers.scrapy.LookaroundEvents": 500,
        "streams.crawlers.scrapy.LookaroundRecrawl": 510,
    }
    LOOKAROUND_KAFKA_BOOTSTRAP = "127.0.0.1:9092"
    LOOKAROUND_REQUESTS_PER_MINUTE = 600

**`LookaroundEvents`** (on Scrapy's ``response_received`` signal, so every response counts,
error statuses included, whatever the spider's callbacks do): the event is built by
`online.page_events.page_event`, the one builder ``lookaround import-warc`` uses too, with the
outlinks from Scrapy's own ``LinkExtractor`` (every ``<a>``/``<area>`` link, no extension
filtered: a link to a PDF is a new outlink too), the text and its digest from
`online.html.parse_html`, ``fetched_at`` from the crawl's clock. A redirect chain
(Scrapy's ``redirect_urls`` / ``redirect_reasons``) gives an event per hop. 2xx answers that
are not HTML and ``robots.txt`` give none (counted). Events are published keyed by URL through
`streams.publish.EventPublisher`: acknowledged, retried, spooled when they cannot be
delivered. With ``LOOKAROUND_WARC_FILE`` the responses are also archived
(`streams.warc.CaptureWriter`).

**`LookaroundRecrawl`**: a consumer thread reads the priorities topic from its start (the
topic is the record of every page's latest priority; a restarted crawler rebuilds its frontier
from it), and a tick every ``LOOKAROUND_RECRAWL_TICK_SECONDS`` hands Scrapy's own scheduler
the pages to recrawl (`streams.crawlers.frontier.RecrawlFrontier`: ``due``, ``budget`` or the
baseline ``interval``) as requests with ``dont_filter=True`` and ``priority`` from the score,
within ``LOOKAROUND_REQUESTS_PER_MINUTE``. At most ``LOOKAROUND_RECRAWL_MAX_OUTSTANDING``
recrawls wait for their answer at a time (default: a second of the budget, at least
``CONCURRENT_REQUESTS``): a crawler that cannot download as fast as its budget keeps no
growing queue of recrawls chosen by stale priorities, and the budget it could not spend is
counted (``lookaround/budget_unspent``). Every request the spider schedules itself (newly
found pages) spends the same budget, except the requests it marks as seeds
(``meta={"lookaround_seed": True}``). Politeness stays Scrapy's (``DOWNLOAD_DELAY``,
AutoThrottle, per-domain concurrency). The spider is kept open until
``LOOKAROUND_RECRAWL_UNTIL`` (a time of the crawl's clock), or for good without it.

Settings (Scrapy's, in ``settings.py`` or ``-s``): every field of `streams.settings.Settings`
as ``LOOKAROUND_<FIELD>`` (``LOOKAROUND_KAFKA_BOOTSTRAP``, ``LOOKAROUND_TOPIC_FETCHED``,
``LOOKAROUND_TOPIC_PRIORITIES``, SASL and TLS options...), and these:

=================================== ======================================================
``LOOKAROUND_PUBLISH_RETRIES``      re-sends of an undelivered event (5), backoff doubling
                                    from ``LOOKAROUND_PUBLISH_BACKOFF_SECONDS`` (1)
``LOOKAROUND_PUBLISH_SPOOL``        where undelivered events go (``lookaround-undelivered
                                    .jsonl``; republish with ``lookaround produce``)
``LOOKAROUND_MAX_TEXT_CHARS``       page text an event carries (2000)
``LOOKAROUND_CLOCK_URL``            a living site's ``/_clock``: fetch times on its clock
``LOOKAROUND_WARC_FILE``            archive the crawl there (WARC 1.1; ``.gz`` compressed)
``LOOKAROUND_RECRAWL_MODE``         ``due`` (default), ``budget``, ``interval`` or ``off``
``LOOKAROUND_REQUESTS_PER_MINUTE``  the request budget (600)
``LOOKAROUND_RECRAWL_INTERVAL_DAYS`` the ``interval`` mode's interval
``LOOKAROUND_RECRAWL_MAX_OUTSTANDING`` recrawls issued and not yet answered, at most
``LOOKAROUND_RECRAWL_UNTIL``        ISO time (crawl clock) to stop recrawling and close
``LOOKAROUND_RECRAWL_CALLBACK``     spider method recrawled responses go to (``parse``)
=================================== ======================================================

Stats (``lookaround/...`` in Scrapy's stats): events sent, published, retried, failed;
responses skipped; recrawl requests issued; priority updates applied.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import orjson

from online.links import InvalidURL, link_info
from online.page_events import DEFAULT_MAX_TEXT_CHARS, is_html, page_event
from streams.clock import REAL_CLOCK, FastClock, clock_from_url
from streams.crawlers.frontier import RecrawlFrontier, TokenBucket, _epoch
from streams.kafka_io import kafka_python_options
from streams.publish import EventPublisher
from streams.settings import Settings
from streams.warc import CaptureWriter

log = logging.getLogger("lookaround.scrapy")

#: meta keys: a request the spider marks as a seed (outside the budget), one we issued, and
#: the fetch time stamped on a response (shared by the events and the archive)
SEED, RECRAWL, FETCHED_AT = "lookaround_seed", "lookaround_recrawl", "lookaround_fetched_at"
_PRIORITY_RANGE = 1_000_000

_clocks: WeakKeyDictionary[Any, FastClock] = WeakKeyDictionary()


def lookaround_settings(scrapy_settings: Any) -> Settings:
    """`Settings` from a Scrapy project's ``LOOKAROUND_<FIELD>`` settings (the environment's
    ``LOOKAROUND_*`` variables fill the rest, as for a worker)."""
    values = {}
    for name in Settings.model_fields:
        value = scrapy_settings.get(f"LOOKAROUND_{name.upper()}")
        if value is not None:
            values[name] = value
    return Settings(**values)


def crawl_clock(crawler: Any) -> FastClock:
    """The crawl's clock: the living site's at ``LOOKAROUND_CLOCK_URL``, else the real one."""
    clock = _clocks.get(crawler)
    if clock is None:
        url = crawler.settings.get("LOOKAROUND_CLOCK_URL")
        clock = clock_from_url(url) if url else REAL_CLOCK
        _clocks[crawler] = clock
    return clock


def fetched_at(response: Any, clock: FastClock) -> float:
    """When ``response`` was fetched, on the crawl's clock: read once, then kept in its meta,
    so every consumer of the response sees the same time."""
    meta = response.meta
    if FETCHED_AT not in meta:
        meta[FETCHED_AT] = clock.now()
    return meta[FETCHED_AT]


def _max_outstanding(settings: Any, bucket: TokenBucket) -> int:
    """``LOOKAROUND_RECRAWL_MAX_OUTSTANDING``, or when 0 (the default) a second of the budget,
    at least ``CONCURRENT_REQUESTS``."""
    value = settings.getint("LOOKAROUND_RECRAWL_MAX_OUTSTANDING", 0)
    if value < 0:
        raise ValueError(
            f"LOOKAROUND_RECRAWL_MAX_OUTSTANDING must be 0 (a second of the budget) or more, "
            f"got {value}"
        )
    return value or max(settings.getint("CONCURRENT_REQUESTS", 16), math.ceil(bucket.burst))


def _is_robots(request: Any) -> bool:
    return request.url.split("?", 1)[0].endswith("/robots.txt") and bool(
        request.meta.get("dont_obey_robotstxt")
    )


class LookaroundEvents:
    """Publishes a fetched-page event for every response (see the module's docstring)."""

    def __init__(self, crawler: Any) -> None:
        from scrapy.linkextractors import LinkExtractor

        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.clock = crawl_clock(crawler)
        self.max_text_chars = settings.getint("LOOKAROUND_MAX_TEXT_CHARS", DEFAULT_MAX_TEXT_CHARS)
        self.extractor = LinkExtractor(deny_extensions=[], unique=True)
        self.publisher = EventPublisher(
            lookaround_settings(settings),
            retries=settings.getint("LOOKAROUND_PUBLISH_RETRIES", 5),
            backoff_seconds=settings.getfloat("LOOKAROUND_PUBLISH_BACKOFF_SECONDS", 1.0),
            spool=Path(settings.get("LOOKAROUND_PUBLISH_SPOOL", "lookaround-undelivered.jsonl")),
        )
        warc = settings.get("LOOKAROUND_WARC_FILE")
        self.warc = None
        if warc:
            self.warc = CaptureWriter(Path(warc))

    @classmethod
    def from_crawler(cls, crawler: Any) -> LookaroundEvents:
        from scrapy import signals

        extension = cls(crawler)
        crawler.signals.connect(extension.response_received, signal=signals.response_received)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def response_received(self, response: Any, request: Any, spider: Any) -> None:
        if _is_robots(request):
            return
        at = fetched_at(response, self.clock)
        for event in self.events(response, at):
            self.publisher.publish(event)
            self.stats.inc_value("lookaround/events_sent")

    def events(self, response: Any, at: float) -> list[dict[str, Any]]:
        """The events of one response: a redirect hop's each, then the response's own."""
        out = []
        hops = response.meta.get("redirect_urls") or []
        reasons = response.meta.get("redirect_reasons") or []
        targets = [*hops[1:], response.url]
        for url, reason, target in zip(hops, reasons, targets, strict=False):
            status = reason if isinstance(reason, int) else 200  # a meta refresh page
            out.append(page_event(url, at, status, location=target))
            self._archive(url, at, status, [("Location", target)], b"")
        status = response.status
        body = response.body
        content_type = _header(response, "Content-Type")
        if 200 <= status < 300 and not is_html(content_type, body):
            self.stats.inc_value("lookaround/skipped_not_html")
            return out
        outlinks = None
        if 200 <= status < 300:
            outlinks = [link.url for link in self.extractor.extract_links(response)]
        location = _header(response, "Location")
        out.append(
            page_event(
                response.url,
                at,
                status,
                body,
                content_type,
                location=response.urljoin(location) if location else None,
                outlinks=outlinks,
                max_text_chars=self.max_text_chars,
            )
        )
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, values in response.headers.items()
            for v in values
        ]
        self._archive(response.url, at, status, headers, body)
        return out

    def _archive(
        self, url: str, at: float, status: int, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        if self.warc is not None:
            self.warc.write(url, at, status, headers, body)

    def spider_closed(self, spider: Any, reason: str) -> None:
        counts = self.publisher.close(timeout=60)
        for name, value in counts.as_dict().items():
            self.stats.set_value(f"lookaround/events_{name}", value)
        if self.warc is not None:
            self.warc.close()
            self.stats.set_value("lookaround/warc_records", self.warc.records)
            self.stats.set_value("lookaround/warc_revisits", self.warc.revisits)
        log.info("lookaround events: %s", counts.as_dict())


def _header(response: Any, name: str) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value else None


class LookaroundRecrawl:
    """Issues recrawl requests from lookaround's priorities (see the module's docstring)."""

    def __init__(self, crawler: Any) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.clock = crawl_clock(crawler)
        mode = settings.get("LOOKAROUND_RECRAWL_MODE", "due")
        days = settings.getfloat("LOOKAROUND_RECRAWL_INTERVAL_DAYS", 0.0)
        self.frontier = RecrawlFrontier(
            mode,
            interval_seconds=days * 86_400.0 if mode == "interval" else None,
            exponent=settings.getfloat("LOOKAROUND_RECRAWL_EXPONENT", 0.5),
            inflight_timeout=settings.getfloat("LOOKAROUND_RECRAWL_INFLIGHT_SECONDS", 60.0),
        )
        self.per_minute = settings.getfloat("LOOKAROUND_REQUESTS_PER_MINUTE", 600.0)
        self.tick_seconds = settings.getfloat("LOOKAROUND_RECRAWL_TICK_SECONDS", 0.1)
        until = settings.get("LOOKAROUND_RECRAWL_UNTIL")
        self.until = _epoch(until) if until else None
        self.callback_name = settings.get("LOOKAROUND_RECRAWL_CALLBACK", "parse")
        self.settings = lookaround_settings(settings) if mode != "interval" else None
        self.bucket = TokenBucket(self.per_minute, time.monotonic())
        self.max_outstanding = _max_outstanding(settings, self.bucket)
        self._outstanding: dict[str, float] = {}  # recrawled URL -> real time issued
        self._updates: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._consumer: threading.Thread | None = None
        self._loop: Any = None
        self._callback: Any = None
        self._sites: frozenset[str] | None = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> LookaroundRecrawl:
        from scrapy import signals
        from scrapy.exceptions import NotConfigured

        if crawler.settings.get("LOOKAROUND_RECRAWL_MODE", "due") == "off":
            raise NotConfigured("LOOKAROUND_RECRAWL_MODE is off")
        extension = cls(crawler)
        for handler, signal in (
            (extension.spider_opened, signals.spider_opened),
            (extension.spider_closed, signals.spider_closed),
            (extension.spider_idle, signals.spider_idle),
            (extension.request_scheduled, signals.request_scheduled),
            (extension.request_dropped, signals.request_dropped),
            (extension.response_received, signals.response_received),
        ):
            crawler.signals.connect(handler, signal=signal)
        return extension

    # -- signals --------------------------------------------------------------------------------

    def spider_opened(self, spider: Any) -> None:
        from twisted.internet import task

        allowed = getattr(spider, "allowed_domains", None)
        if allowed:
            self._sites = frozenset(link_info(f"http://{d}/").site for d in allowed)
        if self.settings is not None:
            self._consumer = threading.Thread(
                target=self._consume, name="lookaround-priorities", daemon=True
            )
            self._consumer.start()
        self._callback = getattr(spider, self.callback_name, None)
        if not callable(self._callback):
            log.error("the spider has no method %r for recrawls", self.callback_name)
            self.crawler.engine.close_spider(spider, "lookaround_no_recrawl_callback")
            return
        self._loop = task.LoopingCall(self.tick)
        self._loop.start(self.tick_seconds, now=False)

    def spider_closed(self, spider: Any, reason: str) -> None:
        self._stop.set()
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._consumer is not None:
            self._consumer.join(10)
        self.stats.set_value("lookaround/frontier_pages", len(self.frontier))
        self.bucket.available(time.monotonic())
        self.stats.set_value("lookaround/budget_unspent", round(self.bucket.unspent))

    def spider_idle(self, spider: Any) -> None:
        from scrapy.exceptions import DontCloseSpider

        if not self._finished():
            raise DontCloseSpider

    def request_scheduled(self, request: Any, spider: Any) -> None:
        if not request.meta.get(RECRAWL) and not request.meta.get(SEED):
            self.bucket.charge(1)  # a page the spider found: the same budget
            self.stats.inc_value("lookaround/requests_found")

    def request_dropped(self, request: Any, spider: Any) -> None:
        if request.meta.get(RECRAWL):
            self._answered(request.url, request.meta)
            self.frontier.release(request.url)
        elif not request.meta.get(SEED):
            self.bucket.charge(-1)  # not sent after all: refund
            self.stats.inc_value("lookaround/requests_found", -1)

    def response_received(self, response: Any, request: Any, spider: Any) -> None:
        if request.meta.get(RECRAWL):
            self._answered(response.url, response.meta)
        if self.frontier.mode != "due" and not _is_robots(request):
            at = fetched_at(response, self.clock)
            for url in [*(response.meta.get("redirect_urls") or []), response.url]:
                if self._in_scope(url):
                    self.frontier.fetched(url, at)

    # -- the loop -------------------------------------------------------------------------------

    def _finished(self) -> bool:
        return self.until is not None and self.clock.now() >= self.until

    def tick(self) -> None:
        """Apply the priority updates that came in; issue the recrawls the budget allows. A
        failure is logged and the next tick tries again (a LoopingCall stops at an error)."""
        try:
            self._tick()
        except Exception:
            log.exception("recrawl tick failed")
            self.stats.inc_value("lookaround/tick_errors")

    def _tick(self) -> None:
        applied = 0
        while True:
            try:
                raw = self._updates.get_nowait()
            except queue.Empty:
                break
            try:
                update = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(update, dict) and self._in_scope(update.get("url")):
                applied += self.frontier.update(update)
        if applied:
            self.stats.inc_value("lookaround/priorities_applied", applied)
        if self._finished():
            return
        real_now = time.monotonic()
        n = min(self.bucket.available(real_now), self._room(real_now))
        if n <= 0:
            return
        for url, score in self.frontier.take(self.clock.now(), n, time.monotonic()):
            self._issue(url, score, self._callback)

    def _issue(self, url: str, score: float, callback: Any) -> None:
        import scrapy

        priority = int(max(-_PRIORITY_RANGE, min(_PRIORITY_RANGE, round(score * 1000))))
        request = scrapy.Request(
            url,
            callback=callback,
            errback=self._failed,
            dont_filter=True,
            priority=priority,
            meta={RECRAWL: True},
        )
        self.bucket.charge(1)
        self._outstanding[url] = time.monotonic()
        self.stats.inc_value("lookaround/recrawls_issued")
        self.crawler.engine.crawl(request)

    def _failed(self, failure: Any) -> None:
        """A recrawl that got no response (an HTTP error status is a fetch: its event goes
        out, its update comes back) may be handed out again."""
        from scrapy.spidermiddlewares.httperror import HttpError

        if failure.check(HttpError):
            return
        request = getattr(failure, "request", None)
        if request is not None:
            self._answered(request.url, request.meta)
            self.frontier.release(request.url)
        self.stats.inc_value("lookaround/recrawls_failed")

    def _answered(self, url: str, meta: dict[str, Any]) -> None:
        """A recrawl (the URL it was issued for, first of its redirect chain) is answered."""
        for hop in [*(meta.get("redirect_urls") or []), url]:
            self._outstanding.pop(hop, None)

    def _room(self, real_now: float) -> int:
        """Recrawls that may be issued before ``LOOKAROUND_RECRAWL_MAX_OUTSTANDING`` wait
        for their answer; one unanswered past the frontier's in-flight timeout counts no more."""
        expired = real_now - self.frontier.inflight_timeout
        for url in [u for u, at in self._outstanding.items() if at < expired]:
            del self._outstanding[url]
        return self.max_outstanding - len(self._outstanding)

    def _in_scope(self, url: Any) -> bool:
        if not isinstance(url, str):
            return False
        if self._sites is None:
            return True

        try:
            return link_info(url).site in self._sites
        except InvalidURL:
            return False

    def _consume(self) -> None:
        """Read the priorities topic from its start, for as long as the spider runs."""
        from kafka import KafkaConsumer, TopicPartition

        assert self.settings is not None
        topic = self.settings.topic_priorities
        consumer = None
        while not self._stop.is_set():
            try:
                if consumer is None:
                    consumer = KafkaConsumer(
                        enable_auto_commit=False, **kafka_python_options(self.settings)
                    )
                    partitions = consumer.partitions_for_topic(topic)
                    if not partitions:
                        consumer.close()
                        consumer = None
                        self._stop.wait(1.0)
                        continue
                    assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
                    consumer.assign(assigned)
                    consumer.seek_to_beginning(*assigned)
                for records in consumer.poll(timeout_ms=200, max_records=5000).values():
                    for record in records:
                        self._updates.put(record.value)
            except Exception as exc:  # broker away: connect again
                log.warning("priorities consumer: %s; reconnecting", exc)
                if consumer is not None:
                    consumer.close()
                consumer = None
                self._stop.wait(1.0)
        if consumer is not None:
            consumer.close()
