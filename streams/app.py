"""The Faust app of a live worker, built from one `Settings` by `create_app`.

* agent ``fetched-pages`` over the fetched-page topic (the consumer group ``settings.app_id``):
  the consumer hands the topic's records over a fetch at a time (`streams.bulk_delivery`),
  and adaptive micro-batches (what arrived while the last batch was processed, up to
  ``batch_size``) go to `streams.live.LiveProcessor` (parsed there, or with
  ``parse_processes`` > 0 in a parser process while the previous batch is processed); the
  records are acked (and so committed) only after their batch is fully processed, published
  and written to Redis;
* task ``embeddings-replica``: an aiokafka consumer with no group that reads every partition of
  the embeddings topic from the beginning and keeps this worker's FAISS replica current; the
  agent starts only once the replica has caught up with the topic's end at start-up;
* task ``broker-probe``: asks the broker for metadata every few seconds (`streams.health`);
* web (``settings.web_port``): ``/health`` (200 JSON when the worker runs, Redis answers, the
  broker answers and nothing is stalled; 503 with the reasons otherwise) and ``/metrics``
  (Prometheus);
* `BoundedStopWorker`: a SIGTERM stops the worker within ``stop_timeout_seconds`` even when
  the broker is gone (then it exits without waiting further: nothing is committed past an
  event that was not fully processed, so the rest is redelivered to the next worker).

Faust's own settings come from the arguments here; its environment variables are only read
under the ``LOOKAROUND_FAUST_`` prefix, so a stray ``BROKER_URL`` cannot redirect a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import threading
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

import faust
from prometheus_client import generate_latest

from batch.helper_processes import helper_pool
from streams import bulk_delivery
from streams.batching import BatchGatherer
from streams.composition import worker_store
from streams.gcpolicy import freeze_startup_heap
from streams.health import HealthWatch, probe_broker
from streams.kafka_io import BadEmbedding, aiokafka_options, parse_embedding, ssl_context
from streams.live import LiveProcessor, Message, RecordLike
from streams.maththreads import single_math_thread
from streams.partitioner import partition_of
from streams.record_values import parse_values
from streams.redis_store import RedisPageStore
from streams.settings import Settings
from streams.worker_metrics import Metrics

FAUST_ENV_PREFIX = "LOOKAROUND_FAUST_"
log = logging.getLogger("lookaround.worker")


def _credentials(settings: Settings) -> Any:
    proto = settings.kafka_security_protocol
    if proto.startswith("SASL"):
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=(
                settings.kafka_sasl_password.get_secret_value()
                if settings.kafka_sasl_password
                else None
            ),
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=ssl_context(settings),
        )
    if proto == "SSL":
        return faust.SSLCredentials(ssl_context(settings))
    return None


def _patch_fetch_wait() -> None:
    """Let an app choose its consumer's ``fetch_max_wait_ms`` (Faust hard-codes 1500 ms).

    A broker that holds a fetch for the whole wait even when records arrive (Tansu does) would
    otherwise add up to 1.5 s to every event's latency.
    """
    from faust.transport.drivers import aiokafka as driver

    cls = driver.AIOKafkaConsumerThread
    if getattr(cls._create_worker_consumer, "_lookaround", False):
        return
    original = cls._create_worker_consumer

    def create(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        wait = getattr(self.app, "lookaround_fetch_max_wait_ms", None)
        if wait is not None:
            consumer._fetch_max_wait_ms = wait
        return consumer

    create._lookaround = True  # type: ignore[attr-defined]
    cls._create_worker_consumer = create  # type: ignore[method-assign]


class BatchPublisher:
    """Publishes a batch's messages as one record batch per partition, on this worker's own
    aiokafka producer: one send and one delivery future per partition instead of per message
    (Faust's producer, and even aiokafka's per-message ``send``, cost several times more).
    Partitions are chosen as Kafka's default partitioner does (murmur2 of the key, compiled in
    `streams.partitioner`; a message without a key goes to a random partition)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer: Any = None
        self._partitions: dict[str, list[int]] = {}

    async def _start(self) -> Any:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            acks="all",
            linger_ms=5,
            max_batch_size=512 * 1024,
            client_id=f"lookaround-{self.settings.worker_id}",
            **aiokafka_options(self.settings),
        )
        await producer.start()
        self.producer = producer
        return producer

    async def send(self, messages: Sequence[Message]) -> Awaitable[None]:
        """Hand (topic, key, value, headers) messages to the producer, in order per partition;
        returns an awaitable of their delivery (acks=all) that raises if any is not delivered."""
        from aiokafka.partitioner import DefaultPartitioner

        if not messages:
            return _delivered()
        producer = self.producer or await self._start()
        choose = DefaultPartitioner()
        batches: dict[tuple[str, int], Any] = {}
        deliveries: list[asyncio.Future] = []
        for topic, key, value, headers in messages:
            partitions = self._partitions.get(topic)
            if partitions is None:
                partitions = sorted(await producer.partitions_for(topic))
                self._partitions[topic] = partitions
            if key is None:
                tp = (topic, choose(key, partitions, partitions))
            else:
                tp = (topic, partitions[partition_of(key, len(partitions))])
            batch = batches.get(tp)
            if batch is None:
                batch = batches[tp] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                deliveries.append(await producer.send_batch(batch, tp[0], partition=tp[1]))
                batch = batches[tp] = producer.create_batch()
                if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                    raise ValueError(f"a {len(value)}-byte message does not fit a batch")
        for (topic, partition), batch in batches.items():
            deliveries.append(await producer.send_batch(batch, topic, partition=partition))
        return asyncio.gather(*deliveries)

    async def stop(self) -> None:
        if self.producer is not None:
            producer, self.producer = self.producer, None
            await producer.stop()


#: How long a stopping worker waits for its last batch's commit (less than the default
#: stop_timeout_seconds, after which `BoundedStopWorker` exits anyway).
_COMMIT_ON_STOP_SECONDS = 6.0


async def _delivered() -> None:
    """Nothing to deliver."""


def create_app(settings: Settings, *, store: RedisPageStore | None = None) -> faust.App:
    """A Faust app for one worker: its agent runs the pipeline through a `LiveProcessor`."""
    _patch_fetch_wait()
    bulk_delivery.install()
    datadir = Path(tempfile.gettempdir()) / f"lookaround-faust-{settings.app_id}-{os.getpid()}"
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{h.strip()}" for h in settings.kafka_bootstrap.split(",")],
        broker_credentials=_credentials(settings),
        env_prefix=FAUST_ENV_PREFIX,
        value_serializer="raw",
        key_serializer="raw",
        store="memory://",
        datadir=str(datadir),
        web_enabled=True,
        web_bind=settings.web_host,
        web_port=settings.web_port,
        web_in_thread=False,
        consumer_auto_offset_reset="earliest",
        topic_allow_declare=False,
        topic_disable_leader=True,
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=settings.topic_replication,
        broker_rebalance_timeout=settings.kafka_rebalance_timeout_seconds,
        broker_session_timeout=settings.kafka_session_timeout_seconds,
        broker_heartbeat_interval=max(settings.kafka_session_timeout_seconds / 5, 0.5),
        broker_commit_interval=1.0,
        producer_acks=-1,
        producer_linger=0.005,
        stream_buffer_maxsize=max(4 * settings.batch_size, 4096),
    )
    app.lookaround_fetch_max_wait_ms = settings.kafka_fetch_max_wait_ms  # type: ignore[attr-defined]
    metrics = Metrics()
    if store is None:
        store = worker_store(settings)
    publisher = BatchPublisher(settings)

    live = LiveProcessor(settings, store, publisher.send, metrics)
    # For the worker's lifetime: spinning BLAS threads would take the parser's core.
    app.lookaround_math_threads = single_math_thread()  # type: ignore[attr-defined]
    state = {"running": False, "replica_ready": asyncio.Event()}
    watch = HealthWatch(settings.health_broker_seconds, settings.health_stall_seconds)
    state["health"] = watch

    fetched = app.topic(settings.topic_fetched, key_type=bytes, value_type=bytes)
    gathered: BatchGatherer = BatchGatherer(settings.batch_size)

    async def take_fetch(messages: list) -> None:
        watch.events_read()
        metrics.fetch_size.observe(len(messages))
        await gathered.put(messages)

    setattr(
        app,
        bulk_delivery.ROUTE_ATTRIBUTE,
        bulk_delivery.BulkRoute(fetched.get_topic_name(), take_fetch),
    )

    @app.agent(fetched, name="fetched-pages")
    async def fetched_pages(stream: faust.StreamT) -> None:
        await state["replica_ready"].wait()
        frozen = freeze_startup_heap()
        log.info("processing %s", settings.topic_fetched, extra={"frozen_objects": frozen})
        aiter(stream.channel)  # subscribes the topic, whose records come through `gathered`
        try:
            await _consume(app, gathered, settings, live, state)
        finally:
            await publisher.stop()

    @app.task
    async def embeddings_replica() -> None:
        await _run_replica(settings, live, state)

    @app.task
    async def broker_probe() -> None:
        every = min(2.0, settings.health_broker_seconds / 3)
        timeout = min(5.0, max(settings.health_broker_seconds / 2, 0.5))
        await probe_broker(watch, aiokafka_options(settings), every, timeout)

    @app.page("/health")
    async def health(web: Any, request: Any) -> Any:
        redis_ok = await asyncio.get_running_loop().run_in_executor(None, live.check_redis)
        watch.refresh_lag(_highwater(app), _assigned(app))
        problems = watch.problems()
        ok = bool(state["running"] and redis_ok and not problems)
        body = {
            "status": "ok" if ok else "unavailable",
            "worker_id": settings.worker_id,
            "running": state["running"],
            "redis": redis_ok,
            "broker": not watch.broker_down(),
            "problems": problems,
            "replica_pages": len(live.index),
            "embeddings_rejected": live.embeddings_rejected,
            "batches": live.batches,
        }
        return web.json(body, status=200 if ok else 503)

    @app.page("/metrics")
    async def prometheus(web: Any, request: Any) -> Any:
        return web.bytes(
            generate_latest(metrics.registry), content_type="text/plain; version=0.0.4"
        )

    return app


async def _consume(
    app: faust.App, gathered: BatchGatherer, settings: Settings, live: LiveProcessor, state: dict
) -> None:
    """Adaptive micro-batches in two overlapping stages.

    The consumer puts each fetch's records in ``gathered`` (`streams.bulk_delivery`), waiting
    while ``batch_size`` of them are waiting there.

    1. The feeder waits until the processor has taken its last batch, then takes everything
       gathered meanwhile (up to ``batch_size``) as the next batch, less what a rebalance made
       stale (and, with ``parse_processes`` > 0, parses it in a parser process; otherwise
       `LiveProcessor.begin` parses it). An idle worker so handles a fetch as soon as it
       comes; a busy one handles the backlog that built up during its last batch in one go
       (see `streams.batching`).
    2. The processor runs each parsed batch through `LiveProcessor.begin` and acks its
       records, in order, only after its commit: no offset is committed past an event that
       was not fully processed (a stop or crash mid-batch leaves its events uncommitted).
    """
    loop = asyncio.get_running_loop()
    watch: HealthWatch = state["health"]
    batches_q: asyncio.Queue = asyncio.Queue(maxsize=1)
    pool = helper_pool(settings.parse_processes) if settings.parse_processes > 0 else None
    if pool is not None:  # start the parser now, not on the first event (seconds of imports)
        await loop.run_in_executor(pool, parse_values, [b"{}"], 2, 1)

    async def feeder() -> None:
        while True:
            await batches_q.join()  # the processor took the last batch: gather until now
            messages = bulk_delivery.current(app, await gathered.get())
            if not messages:
                continue
            parsed = None
            if pool is not None:
                parsed = await loop.run_in_executor(
                    pool,
                    parse_values,
                    [m.value for m in messages],
                    settings.embedding_dim,
                    settings.max_outlinks,
                    settings.event_limits(),
                )
            await batches_q.put((messages, parsed))

    async def commit(previous: asyncio.Task | None, batch: Awaitable, messages: list) -> None:
        if previous is not None:
            await previous  # commits in order; raises if the one before failed
        await batch
        bulk_delivery.ack(app, messages)
        watch.committed(_update_lag(app, live, messages), _highwater(app))
        if not len(gathered) and batches_q.empty() and not live.in_batch:
            watch.idle()

    async def processor() -> None:
        # Batch n+1 is processed while batch n's commit (the broker's acks, then the Redis
        # write in a thread) runs; one commit at most is outstanding.
        previous: asyncio.Task | None = None
        try:
            while True:
                messages, parsed = await batches_q.get()
                batches_q.task_done()
                batch = await live.begin(messages, parsed)
                task = asyncio.create_task(commit(previous, batch, messages))
                if previous is not None:
                    await asyncio.shield(previous)  # a stop must not cancel a commit
                previous = task
        finally:
            # A stop lets the outstanding commit finish (its records acked, not redelivered).
            if previous is not None and not previous.done():
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(previous), _COMMIT_ON_STOP_SECONDS)

    stages = [asyncio.create_task(feeder()), asyncio.create_task(processor())]
    state["running"] = True
    try:
        done, _ = await asyncio.wait(stages, return_when=asyncio.FIRST_COMPLETED)
        for stage in done:
            stage.result()  # re-raise what stopped it
        raise RuntimeError("the worker's feeder or processor stopped")
    finally:
        for stage in stages:
            stage.cancel()
        await asyncio.gather(*stages, return_exceptions=True)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _highwater(app: faust.App):  # type: ignore[no-untyped-def]
    """(topic, partition) -> the consumer's latest high-water mark, or None."""
    from faust.types import TP

    def high(topic: str, partition: int) -> int | None:
        try:
            return app.consumer.highwater(TP(topic, partition))
        except Exception:
            return None

    return high


def _assigned(app: faust.App) -> set[tuple[str, int]] | None:
    """The (topic, partition)s this worker consumes now (None: not known yet)."""
    try:
        return {(tp.topic, tp.partition) for tp in app.consumer.assignment()}
    except Exception:
        return None


def _update_lag(
    app: faust.App, live: LiveProcessor, records: Sequence[RecordLike]
) -> dict[tuple[str, int], int]:
    """Set the lag gauges of the partitions in ``records``; their last offsets."""
    last: dict[tuple[str, int], int] = {}
    for r in records:
        last[(r.topic, r.partition)] = r.offset
    highwater = _highwater(app)
    for (topic, partition), offset in last.items():
        high = highwater(topic, partition)
        if high is not None:
            live.metrics.lag.labels(partition=str(partition)).set(max(high - offset - 1, 0))
    return last


class BoundedStopWorker(faust.Worker):
    """A Faust worker whose stop on SIGTERM / SIGINT takes at most ``stop_timeout`` seconds.

    Faust's stop waits on the broker (a last commit, leaving the group, flushing the
    producer); with the broker gone it would wait for minutes. After ``stop_timeout`` the
    process exits anyway (status 0, as for any requested stop): every event whose batch was
    not committed is redelivered, and Redis writes are idempotent, so nothing is lost.
    """

    stop_timeout: float = 8.0

    def _schedule_shutdown(self, signal: Any) -> None:
        if not self._signal_stop_time:
            timer = threading.Timer(self.stop_timeout, _exit_now, args=(self.stop_timeout,))
            timer.daemon = True
            timer.start()
        super()._schedule_shutdown(signal)


def _exit_now(timeout: float) -> None:
    log.warning("stop took longer than %.0f s (broker gone?): exiting now", timeout)
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os._exit(0)


async def _run_replica(settings: Settings, live: LiveProcessor, state: dict) -> None:
    """Read the embeddings topic in full, forever; set ``replica_ready`` once caught up."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id=f"lookaround-replica-{settings.worker_id}",
        fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
        **aiokafka_options(settings),
    )
    await consumer.start()
    try:
        partitions = None
        for _ in range(100):
            partitions = consumer.partitions_for_topic(settings.topic_embeddings)
            if partitions:
                break
            await consumer.force_metadata_update()
            await asyncio.sleep(0.2)
        if not partitions:
            raise RuntimeError(f"topic {settings.topic_embeddings} not found")
        tps = [TopicPartition(settings.topic_embeddings, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        ready: asyncio.Event = state["replica_ready"]
        idle_polls = 0
        while True:
            batches = await consumer.getmany(timeout_ms=200, max_records=5000)
            items = []
            own = live.own_embedding
            for msgs in batches.values():
                for msg in msgs:
                    if own(msg.headers):
                        continue
                    try:
                        items.append(parse_embedding(msg.value, settings.embedding_dim))
                    except BadEmbedding as exc:  # a foreign message must not stop the replica
                        live.reject_embedding(exc, f"{msg.topic}[{msg.partition}]@{msg.offset}")
            if items:  # behind a running batch, in its thread (see `streams.live`)
                await live.in_pipeline_thread(live.apply_embeddings, items)
            elif live.pending:
                await live.in_pipeline_thread(live.retry_pending)
            if not ready.is_set():
                idle_polls = 0 if items else idle_polls + 1
                # Caught up: past the end offsets seen at start (or the topic went quiet).
                positions = [await consumer.position(tp) for tp in tps]
                if idle_polls >= 2 and all(
                    pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)
                ):
                    log.info("embeddings replica ready", extra={"pages": len(live.index)})
                    changed = live.check_embedding_dim()
                    if changed is not None:
                        log.error(changed)
                    ready.set()
    finally:
        await consumer.stop()
