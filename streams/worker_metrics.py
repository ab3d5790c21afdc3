"""The live worker's Prometheus metrics: what it counts, in one registry of its own.

Defined apart from the worker (`streams.live`) so that what is exported, and under which
names, reads as one list.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info


class Metrics:
    """The worker's Prometheus metrics, in their own registry (served at /metrics)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.events_in = Counter("lookaround_events_in", "Records read", registry=r)
        self.priorities_out = Counter(
            "lookaround_priorities_out", "Priority updates published", registry=r
        )
        self.embeddings_out = Counter(
            "lookaround_embeddings_out", "Embeddings published", registry=r
        )
        self.related_out = Counter(
            "lookaround_related_updates_out",
            "Related updates published (a sibling's priority revised by its page's new links)",
            registry=r,
        )
        self.rejects = Counter(
            "lookaround_rejects", "Rejected events by field", ["field"], registry=r
        )
        self.stale = Counter("lookaround_stale", "Stale events ignored", registry=r)
        self.duplicates = Counter("lookaround_duplicates", "Duplicate events ignored", registry=r)
        self.batch_seconds = Histogram(
            "lookaround_batch_seconds",
            "Time to process one micro-batch end to end",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.batch_size = Histogram(
            "lookaround_batch_events",
            "Records per micro-batch",
            buckets=(1, 10, 50, 100, 250, 500, 1000, 5000),
            registry=r,
        )
        self.fetch_size = Histogram(
            "lookaround_fetch_records",
            "Records of the fetched-page topic the consumer handed over per fetch",
            buckets=(1, 10, 50, 100, 250, 500, 1000, 5000),
            registry=r,
        )
        self.stage_seconds = Counter(
            "lookaround_stage_seconds",
            "Time spent per stage of a batch (process, publish, write)",
            ["stage"],
            registry=r,
        )
        self.redis_retries = Counter(
            "lookaround_redis_retries", "Batch attempts failed on Redis", registry=r
        )
        self.lag = Gauge(
            "lookaround_consumer_lag", "Records behind the end", ["partition"], registry=r
        )
        self.replica_pages = Gauge(
            "lookaround_replica_pages", "Pages in this worker's FAISS replica", registry=r
        )
        self.replica_applied = Counter(
            "lookaround_replica_applied", "Embeddings applied from the topic", registry=r
        )
        self.model = Info("lookaround_model", "Scorer and model versions in use", registry=r)
        self.learner_skipped = Gauge(
            "lookaround_learner_steps_skipped",
            "Online-learner steps skipped: they would have made its weights non-finite",
            registry=r,
        )
        self.nonfinite_scores = Gauge(
            "lookaround_nonfinite_scores",
            "Priorities with a NaN or infinite value replaced (none expected)",
            registry=r,
        )
        self.embeddings_rejected = Counter(
            "lookaround_embeddings_rejected",
            "Embeddings-topic messages skipped, by reason (malformed, dimension, not_finite)",
            ["reason"],
            registry=r,
        )
        self.learner_refused = Counter(
            "lookaround_learner_state_refused",
            "Stored learner states refused at start (not data we wrote: the scorer started fresh)",
            registry=r,
        )
