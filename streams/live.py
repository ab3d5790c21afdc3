"""What a live worker does with a batch, independent of Faust (the app in `streams.app` feeds it).

For each micro-batch of fetched-page records:

1. parse every value (`streams.record_values.parse_values`); rejects go to the dead-letter
   topic with their reason and source offset;
2. `PagePipeline.process_isolated` over a store that defers its write
   (`streams.deferred_store`: reads go to Redis, the write is kept), retried with exponential
   backoff while Redis is unreachable; a failed attempt is rolled back in the FAISS replica
   so the retry sees the index as it was. An event whose processing raises is found by
   bisection and goes to the dead-letter topic (field ``processing``, the error as reason);
   the rest of its batch goes through, so one bad event never stops a partition;
3. dead letters, priority updates (keyed by URL) and the pages' new embeddings (keyed by page
   id, compacted topic) are handed to the producer together (`begin` ends here);
4. the batch's commit awaits their delivery, then writes the batch's pages to Redis in one
   atomic, idempotent transaction (in a thread, retried too);
5. only then does the caller ack the records (so offsets never pass unprocessed events).

Steps 4 and 5 of a batch overlap the next batch's steps 1–3 (the worker keeps one commit
outstanding): the next batch reads through the writes not yet in Redis, and commits run in
order. Waiting for the broker's acks and for Redis no longer holds up the pipeline.

Steps 1–3 run in the processor's own thread (`LiveProcessor.in_pipeline_thread`), not in the
event loop: Faust hands the worker its messages in the loop, so a batch processed there would
stop the next one from arriving, and a busy worker would go on taking the few events that came
between two batches instead of its backlog (`streams.batching`). The pipeline, the FAISS
replica and the learner are used from that one thread only: the replica's updates from the
embeddings topic queue behind a running batch instead of racing it.

A crash between 3 and 4 replays the batch: the same priorities are published again (the crawler
sees an update twice, harmless); a crash after 4 finds the pages already written, so the
redelivered events are duplicates and change nothing (no double count).

The FAISS replica holds every page's latest embedding, from this worker's own batches and from
the embeddings topic (all partitions, read from the beginning, outside the consumer group).
Each vector is versioned by its fetch time: an older message never replaces a newer vector, so
the worker's own echoes and replays are no-ops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np
import orjson
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from online.fetch import Fetch
from online.index import FaissIndex
from online.outcome import Processed
from online.stores import PageWrites
from streams.composition import worker_pipeline
from streams.deferred_store import DeferredStore
from streams.kafka_io import (
    PUBLISHER_HEADER,
    BadEmbedding,
    dead_letter_message,
    embedding_message,
    processing_headers,
)
from streams.logs import Throttle
from streams.record_values import parse_values
from streams.redis_store import RedisPageStore
from streams.settings import Settings
from streams.worker_metrics import Metrics

log = logging.getLogger("lookaround.worker")

#: The dead letter's field for an event that passed validation but whose processing raised.
PROCESSING_FIELD = "processing"

REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, ConnectionError, TimeoutError)

T = TypeVar("T")

#: A message to publish: (topic, key, value, headers).
Message = tuple[str, bytes | None, bytes, list[tuple[str, bytes]]]
#: publish([message, ...]): hands a batch's messages to the producer (in order per partition)
#: and returns an awaitable of their delivery, which raises if one is not delivered.
Publish = Callable[[Sequence[Message]], Awaitable[Awaitable[None]]]


class RecordLike(Protocol):
    """What a worker reads of a consumed record: a Faust message has these attributes, so a
    batch is handled without a copy per event."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


@dataclass
class LiveBatch:
    """What the worker did with one batch of records: counts for the metrics and the
    pipeline's results (the pipeline's own outcome is `online.outcome.BatchOutcome`)."""

    records: int = 0
    rejects: int = 0
    priorities: int = 0
    #: related updates (`online.related_updates`), on the priorities topic too
    related: int = 0
    embeddings: int = 0
    attempts: int = 1
    results: list[Processed] = field(default_factory=list)


@dataclass
class _Done:
    """A batch through the pipeline: its results and related updates, the (position, error) of
    each event whose processing raised, the embeddings to publish (key, message), the layer
    of its writes, and the attempts it took."""

    results: list[Processed]
    related: list[dict]
    failed: list[tuple[int, str]]
    embeddings: list[tuple[bytes, bytes]]
    layer: PageWrites
    attempts: int = 1


def _finish_interrupted_write(store: RedisPageStore) -> None:
    """A cluster write this worker left part way (it died between two slots' scripts) is
    finished from its journal before anything is read, so the store is as the batch left
    it and the redelivered events are duplicates, as on one server. A journal that is not
    ours is logged and left for the next write to replace."""
    try:
        calls = store.finish_interrupted_write()
    except ValueError as exc:
        log.error("the write journal of worker %s refused: %s", store.worker_id, exc)
        return
    if calls:
        log.warning(
            "finished an interrupted write of worker %s: %d script calls run again",
            store.worker_id,
            calls,
        )


class LiveProcessor:
    """The worker's core: parse, process (with Redis retries), publish, write, in that order."""

    def __init__(
        self,
        settings: Settings,
        store: RedisPageStore,
        publish: Publish,
        metrics: Metrics | None = None,
        *,
        index: FaissIndex | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_backoff: float = 30.0,
    ) -> None:
        self.settings = settings
        self.store = store
        _finish_interrupted_write(store)
        self.deferred = DeferredStore(store)
        self.publish = publish
        self.metrics = metrics or Metrics()
        self.sleep = sleep
        self.max_backoff = max_backoff
        self.pipeline = worker_pipeline(settings, self.deferred, index=index)  # type: ignore[arg-type]
        scorer = self.pipeline.scorer
        self._models_shown: dict[str, str] = {}
        self.metrics.model.info(
            {"scorer": str(scorer.name), "version": str(getattr(scorer, "version", ""))}
        )
        #: Fetch time of the vector each page has in the replica (the version).
        self.versions: dict[int, float] = {}
        self._published_fp: dict[int, int] = {}
        self._pending: dict[int, tuple[float, np.ndarray, str]] = {}
        self.redis_ok = True
        #: embeddings-topic messages skipped, by reason; the foreign dimensions seen
        self.embeddings_rejected: dict[str, int] = {}
        self.foreign_dimensions: dict[int, int] = {}
        self._reject_log = Throttle(every=60.0)
        self.metrics.learner_refused.inc(self.pipeline.counters.learner_refused)
        self.batches = 0
        self.in_batch = False
        #: This worker's place in a processing order that `lookaround replay-topic` follows:
        #: its start (runs sort by it) and the events it has passed to the pipeline.
        self.run_id = time.time_ns()
        self.sequence = 0
        #: The header this process's embeddings messages carry (`own_embedding`).
        self.publisher = (PUBLISHER_HEADER, b"%s:%d" % (settings.worker_id.encode(), self.run_id))
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="lookaround-pipeline")

    async def in_pipeline_thread(self, action: Callable[..., T], *args: object) -> T:
        """``action(*args)`` in the processor's thread, after what is already queued there: the
        one thread that uses the pipeline, the replica and the learner (see the module
        docstring), so that the event loop goes on taking messages meanwhile."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, action, *args)

    @property
    def index(self) -> FaissIndex:
        return self.pipeline.index  # type: ignore[return-value]

    # -- the FAISS replica --------------------------------------------------------------------

    def reject_embedding(self, exc: BadEmbedding, where: str) -> None:
        """Skip an embeddings-topic message this worker cannot use: counted by reason (metric
        ``lookaround_embeddings_rejected_total``), logged at most once a minute per reason
        with how many were not logged, never fatal."""
        reason = exc.reason
        self.embeddings_rejected[reason] = self.embeddings_rejected.get(reason, 0) + 1
        if exc.found is not None:
            self.foreign_dimensions[exc.found] = self.foreign_dimensions.get(exc.found, 0) + 1
        self.metrics.embeddings_rejected.labels(reason=reason).inc()
        due, skipped = self._reject_log.due(reason)
        if due:
            log.warning(
                "embeddings message skipped (%s) at %s: %s",
                reason,
                where,
                exc,
                extra={"reason": reason, "not_logged_since": skipped},
            )

    def check_embedding_dim(self) -> str | None:
        """Once the replica has caught up at start: a clear message when the topic holds
        vectors of another dimension than this worker's ``embedding_dim`` (a deployment that
        changed it but kept the topic), else None."""
        if not self.foreign_dimensions:
            return None
        found = ", ".join(
            f"{n} of dimension {d}" for d, n in sorted(self.foreign_dimensions.items())
        )
        return (
            f"embedding_dim changed? The embeddings topic {self.settings.topic_embeddings} holds "
            f"vectors this worker cannot use ({found}); its embedding_dim is "
            f"{self.settings.embedding_dim}. They are skipped: the pages they belong to have no "
            "related pages until fetched again. To start over, give the workers a new "
            "embeddings topic (LOOKAROUND_TOPIC_EMBEDDINGS), or set embedding_dim back."
        )

    def own_embedding(self, headers: Sequence[tuple[str, bytes]] | None) -> bool:
        """Whether an embeddings message was published by this process: its vector went into
        the replica, and its version into ``versions``, as it was published, so reading it
        back would change nothing (`apply_embeddings` would drop it) and is skipped unparsed.
        A restarted worker is another process and applies what it published before."""
        return bool(headers) and self.publisher in headers  # type: ignore[operator]

    def apply_embeddings(self, items: Sequence[tuple[int, float, np.ndarray, str]]) -> int:
        """Upsert (page id, version, vector, url) from the embeddings topic where newer than
        the replica's; returns how many were applied. Within ``items`` the later of equal
        versions wins.

        A vector is applied only once its fetch is committed in Redis (the page's state is at
        least as new): a worker publishes a batch's embeddings before it writes the batch, so a
        vector can be ahead of Redis for a moment, or for good if that worker died in between
        and its batch is processed again. Such vectors wait in ``pending`` until Redis has
        their fetch (or this worker processes it itself, making them redundant).
        """
        for pid, ts, vec, url in items:
            have = self._pending.get(pid)
            if have is None or ts >= have[0]:
                self._pending[pid] = (ts, vec, url)
        return self.retry_pending()

    def retry_pending(self) -> int:
        if not self._pending:
            return 0
        for pid in [p for p, (ts, _, _) in self._pending.items() if ts <= self._version(p)]:
            del self._pending[pid]
        if not self._pending:
            return 0
        pids = list(self._pending)
        try:
            states = self.store.get_states([self._pending[p][2] for p in pids])
        except REDIS_DOWN:
            return 0
        fresh = []
        for pid, state in zip(pids, states, strict=True):
            ts, vec, _ = self._pending[pid]
            if state is not None and state.last_fetched_at >= ts:
                fresh.append((pid, ts, vec))
                del self._pending[pid]
        if not fresh:
            return 0
        ids = np.array([f[0] for f in fresh], dtype=np.int64)
        vecs = np.stack([f[2] for f in fresh]).astype(np.float32)
        self.index.upsert(ids, vecs)
        for pid, ts, _ in fresh:
            self.versions[pid] = ts
        self.metrics.replica_applied.inc(len(fresh))
        self.metrics.replica_pages.set(len(self.index))
        return len(fresh)

    def _version(self, pid: int) -> float:
        return self.versions.get(pid, float("-inf"))

    @property
    def pending(self) -> int:
        """Embeddings read from the topic, waiting for their fetch to be committed."""
        return len(self._pending)

    # -- one batch ----------------------------------------------------------------------------

    async def handle(
        self,
        records: Sequence[RecordLike],
        parsed: Sequence[Fetch | tuple[str, str]] | None = None,
    ) -> LiveBatch:
        """Process one batch and commit it; ``parsed`` is `parse_values` of the records when
        already done."""
        commit = await self.begin(records, parsed)
        return await commit

    async def begin(
        self,
        records: Sequence[RecordLike],
        parsed: Sequence[Fetch | tuple[str, str]] | None = None,
    ) -> Awaitable[LiveBatch]:
        """Process one batch and hand its messages to the producer; returns its commit, which
        waits for their delivery and then writes the batch to Redis.

        The caller may process the next batch before awaiting a commit (its reads see the
        unwritten batches), but awaits commits in order and acks a batch's records only after
        its commit: so the wait for the broker's acks and the Redis write overlap the next
        batch's work, and no offset passes an event whose priority or state is not stored.
        """
        started = time.perf_counter()
        self.in_batch = True
        try:
            outcome, delivered, layer = await self._begin(records, parsed)
        finally:
            self.in_batch = False
        return self._commit(outcome, delivered, layer, started)

    async def _commit(
        self, outcome: LiveBatch, delivered: Awaitable[None], layer: PageWrites, started: float
    ) -> LiveBatch:
        m = self.metrics
        t0 = time.perf_counter()
        await delivered
        t1 = time.perf_counter()
        m.stage_seconds.labels(stage="publish").inc(t1 - t0)
        await self._retry_async(lambda: self.deferred.write_layer(layer), "write")
        self.deferred.release(layer)
        m.stage_seconds.labels(stage="write").inc(time.perf_counter() - t1)
        m.priorities_out.inc(outcome.priorities)
        m.related_out.inc(outcome.related)
        m.embeddings_out.inc(outcome.embeddings)
        m.replica_pages.set(len(self.index))
        m.batch_seconds.observe(time.perf_counter() - started)
        m.batch_size.observe(outcome.records)
        self.batches += 1
        return outcome

    async def _begin(
        self, records: Sequence[RecordLike], parsed: Sequence[Fetch | tuple[str, str]] | None
    ) -> tuple[LiveBatch, Awaitable[None], PageWrites]:
        s = self.settings
        m = self.metrics
        m.events_in.inc(len(records))
        outcome = LiveBatch(records=len(records))
        if parsed is None:
            values = [r.value for r in records]
            limits = s.event_limits()
            parsed = await self.in_pipeline_thread(
                parse_values, values, s.embedding_dim, s.max_outlinks, limits
            )
        fetches: list[Fetch] = []
        sources: list[RecordLike] = []
        messages: list[Message] = []
        for rec, item in zip(records, parsed, strict=True):
            if isinstance(item, Fetch):
                fetches.append(item)
                sources.append(rec)
                continue
            field_name, reason = item
            messages.append(self._dead_letter(rec, field_name, reason, outcome))
        t0 = time.perf_counter()
        done = await self._process(fetches)
        results, related, failed = done.results, done.related, done.failed
        outcome.attempts = done.attempts
        if failed:
            for at, error in failed:
                reason = f"processing failed: {error}"
                messages.append(self._dead_letter(sources[at], PROCESSING_FIELD, reason, outcome))
            left_out = {at for at, _ in failed}
            sources = [rec for at, rec in enumerate(sources) if at not in left_out]
        t1 = time.perf_counter()
        m.stage_seconds.labels(stage="process").inc(t1 - t0)
        outcome.results = results
        topic = s.topic_priorities
        stale = duplicates = 0
        first, self.sequence = self.sequence, self.sequence + len(results)
        for at, (r, rec) in enumerate(zip(results, sources, strict=True)):
            if r.priority is not None:
                headers = processing_headers(self.run_id, first + at, rec.partition, rec.offset)
                messages.append((topic, r.event.url.encode(), orjson.dumps(r.priority), headers))
            elif r.emitted.kind == "stale":
                stale += 1
            elif r.emitted.kind == "duplicate":
                duplicates += 1
        outcome.priorities = len(messages) - outcome.rejects
        for update in related:  # after the fetches' own: a crawler applies them in order
            messages.append((topic, update["url"].encode(), orjson.dumps(update), []))
        outcome.related = len(related)
        for key, value in done.embeddings:
            messages.append((s.topic_embeddings, key, value, [self.publisher]))
        outcome.embeddings = len(messages) - outcome.rejects - outcome.priorities - outcome.related
        if stale:
            m.stale.inc(stale)
        if duplicates:
            m.duplicates.inc(duplicates)
        delivered = await self.publish(messages)
        m.stage_seconds.labels(stage="publish").inc(time.perf_counter() - t1)
        return outcome, delivered, done.layer

    def _dead_letter(
        self, rec: RecordLike, field_name: str, reason: str, outcome: LiveBatch
    ) -> Message:
        """The dead-letter message of a rejected record, counted in ``outcome`` and metrics."""
        outcome.rejects += 1
        self.metrics.rejects.labels(field=field_name).inc()
        value = dead_letter_message(
            rec.value, rec.key, field_name, reason, rec.topic, rec.partition, rec.offset
        )
        return (self.settings.topic_dead_letter, rec.key, value, [])

    def _embeddings(self, results: list[Processed]) -> list[tuple[bytes, bytes]]:
        """(key, message) of each page whose indexed vector this batch changed; records the
        versions of all pages the batch applied."""
        latest: dict[int, Processed] = {}
        for r in results:
            if r.priority is not None and r.page_id in self.index:
                latest[r.page_id] = r
        if not latest:
            return []
        out = []
        changed = [
            r for pid, r in latest.items() if self._published_fp.get(pid) != r.event.source_fp
        ]
        if changed:
            ids = np.array([r.page_id for r in changed], dtype=np.int64)
            vectors = self.index.reconstruct_many(ids)
            for r, vec in zip(changed, vectors, strict=True):
                out.append(
                    (
                        str(r.page_id).encode(),
                        embedding_message(r.page_id, r.event.url, r.event.timestamp, vec),
                    )
                )
                self._published_fp[r.page_id] = r.event.source_fp
        for pid, r in latest.items():
            self.versions[pid] = max(self.versions.get(pid, float("-inf")), r.event.timestamp)
        return out

    async def _process(self, fetches: list[Fetch]) -> _Done:
        """The batch through the pipeline, retried while Redis is unreachable."""
        attempt = 0
        delay = 0.1
        while True:
            attempt += 1
            try:
                done = await self.in_pipeline_thread(self._attempt, fetches)
            except REDIS_DOWN as exc:
                delay = await self._backoff(exc, "process", attempt, delay)
                continue
            self._set_redis(True)
            done.attempts = attempt
            return done

    def _attempt(self, fetches: list[Fetch]) -> _Done:
        """One attempt at a batch, in the processor's thread, up to its sealed layer: no update
        of the replica comes between the batch and the embeddings it publishes. An attempt
        that Redis failed is rolled back in the replica and its pending writes dropped, so the
        next sees things as they were."""
        if not fetches:
            return _Done([], [], [], [], self.deferred.seal())
        ids = np.unique(np.fromiter((f.page_id for f in fetches), np.int64, len(fetches)))
        present = self.index.contains_many(ids)
        before = self.index.reconstruct_many(ids[present]) if present.any() else None
        try:
            isolated = self.pipeline.process_isolated(fetches)
        except REDIS_DOWN:
            self._rollback(ids, present, before)
            self.deferred.discard()
            raise
        results = isolated.outcome.results
        self._model_versions(results)
        self._guard_metrics()
        embeddings = self._embeddings(results)
        layer = self.deferred.seal()
        return _Done(results, isolated.outcome.related, isolated.failed, embeddings, layer)

    def _guard_metrics(self) -> None:
        """The learner's skipped steps and the replaced scores, as the pipeline counts them."""
        pipeline = self.pipeline
        self.metrics.nonfinite_scores.set(pipeline.counters.nonfinite_scores)
        if pipeline.learns:
            learner = getattr(pipeline.scorer.state(), "learner", None)  # type: ignore[attr-defined]
            self.metrics.learner_skipped.set(int(getattr(learner, "n_skipped", 0)))

    def _model_versions(self, results: list[Processed]) -> None:
        """Show the model versions behind the latest priorities (a refreshed batch model
        appears here without a restart)."""
        for r in reversed(results):
            if r.priority is not None:
                scorer = r.priority["scorer"]
                labels = {"scorer": str(scorer["name"]), "version": str(scorer["version"])}
                for kind, version in scorer.get("models", {}).items():
                    labels[f"{kind}_model"] = str(version)
                if labels != self._models_shown:
                    self.metrics.model.info(labels)
                    self._models_shown = labels
                return

    def _rollback(self, ids: np.ndarray, present: np.ndarray, before: np.ndarray | None) -> None:
        """Put the replica back as it was before a failed attempt (its pages only)."""
        added = ids[~present]
        added = added[self.index.contains_many(added)]
        if len(added):
            self.index.remove(added)
        if before is not None:
            self.index.upsert(ids[present], before)

    async def _retry_async(self, action: Callable[[], object], what: str) -> None:
        """Run ``action`` in a thread until it gets through to Redis, with backoff."""
        attempt, delay = 0, 0.1
        while True:
            attempt += 1
            try:
                await asyncio.to_thread(action)
                self._set_redis(True)
                return
            except REDIS_DOWN as exc:
                delay = await self._backoff(exc, what, attempt, delay)

    async def _backoff(self, exc: BaseException, what: str, attempt: int, delay: float) -> float:
        self._set_redis(False)
        self.metrics.redis_retries.inc()
        log.warning(
            "redis unavailable, retrying batch",
            extra={"step": what, "attempt": attempt, "delay_s": delay, "error": str(exc)},
        )
        await self.sleep(delay)
        return min(delay * 2, self.max_backoff)

    def _set_redis(self, ok: bool) -> None:
        if ok != self.redis_ok:
            log.info("redis %s", "reachable again" if ok else "unreachable")
        self.redis_ok = ok

    # -- health -------------------------------------------------------------------------------

    def check_redis(self) -> bool:
        try:
            return self.store.ping()
        except Exception:
            return False
