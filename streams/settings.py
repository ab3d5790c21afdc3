"""One settings object for the live pipeline, read once at start and passed down.

Every value comes from keyword arguments or ``LOOKAROUND_*`` environment variables (e.g.
``LOOKAROUND_KAFKA_BOOTSTRAP=kafka:9092``, ``LOOKAROUND_REDIS_URL=redis://redis:6379/0``).
Nothing deeper in the code reads the environment. Secrets are `SecretStr`: they never appear
in ``repr``, logs or `public_dict`.

>>> s = Settings(kafka_bootstrap="k:9092", redis_password="hunter2")
>>> s.topic_fetched, s.topic_partitions
('lookaround.fetched-pages', 8)
>>> "hunter2" in repr(s) or "hunter2" in str(s.public_dict())
False
>>> Settings(redis_url="redis://:hunter2@cache:6379/0").public_dict()["redis_url"]
'redis://***@cache:6379/0'
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from batch.registry import DEFAULT_POLL_SECONDS
from online.events import (
    DEFAULT_EARLIEST_FETCH,
    DEFAULT_EMBEDDING_DIM,
    DEFAULT_MAX_AHEAD_SECONDS,
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_OUTLINKS,
    DEFAULT_MAX_URL_LENGTH,
    EventLimits,
)
from online.features import DEFAULT_COMPACT_STORE, DEFAULT_NEIGHBOURS
from online.history import DEFAULT_HISTORY
from online.links import mask_userinfo
from online.neighbour_search import DEFAULT_DRIFT_GROWTH, DEFAULT_DRIFT_SIMILARITY
from online.scoring import DEFAULT_SCORER

#: Hash tags the Redis keys are spread over (`streams.redis_store.slot_tags`): enough that
#: every master of a large cluster holds its share, few enough that a batch touches each at
#: most once per read.
DEFAULT_SLOT_TAGS = 1024

ENV_PREFIX = "LOOKAROUND_"


class Settings(BaseSettings):
    """Settings of a worker, the tools that talk to Kafka, and the trainer."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", validate_default=True
    )

    # -- identity ------------------------------------------------------------------------------
    app_id: str = Field("lookaround", description="Kafka consumer group / Faust app id.")
    worker_id: str = Field(
        default_factory=socket.gethostname,
        description="This worker's name (keys its online-learner checkpoint).",
    )

    # -- Kafka ---------------------------------------------------------------------------------
    kafka_bootstrap: str = Field(
        "127.0.0.1:9092", description="Kafka brokers: host:port[,host:port...]."
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", description="SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."
    )
    kafka_sasl_username: str | None = Field(None, description="SASL user name.")
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password (secret).")
    kafka_ssl_cafile: Path | None = Field(None, description="CA bundle for the brokers (PEM).")
    kafka_ssl_certfile: Path | None = Field(None, description="Client certificate (PEM, mTLS).")
    kafka_ssl_keyfile: Path | None = Field(None, description="Client key (PEM, mTLS).")

    topic_fetched: str = Field("lookaround.fetched-pages", description="Fetched pages in.")
    topic_priorities: str = Field("lookaround.priorities", description="Priority updates out.")
    topic_embeddings: str = Field(
        "lookaround.embeddings", description="Compacted: every page's current embedding."
    )
    topic_dead_letter: str = Field(
        "lookaround.dead-letter", description="Rejected events with their reason."
    )
    topic_partitions: int = Field(8, ge=1, description="Partitions when a topic is created.")
    topic_replication: int = Field(1, ge=1, description="Replicas when a topic is created.")
    kafka_session_timeout_seconds: float = Field(
        10.0, gt=0, description="Consumer-group session timeout of a worker."
    )
    kafka_rebalance_timeout_seconds: float = Field(
        10.0, gt=0, description="How long a rebalance waits for the group's members."
    )
    kafka_fetch_max_wait_ms: int = Field(
        100, ge=0, description="Longest a fetch waits for records (bounds the added latency)."
    )

    # -- Redis ---------------------------------------------------------------------------------
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="redis://, rediss:// (TLS) or unix:// URL."
    )
    redis_username: str | None = Field(None, description="Redis ACL user name (AUTH).")
    redis_password: SecretStr | None = Field(None, description="Redis password (secret).")
    redis_ssl_cafile: Path | None = Field(None, description="CA bundle for rediss:// (PEM).")
    redis_key_prefix: str = Field("lookaround:", description="Prefix of every key we write.")
    redis_state_ttl_seconds: int | None = Field(
        None, ge=1, description="Forget pages not fetched for this long (None: keep)."
    )
    redis_cluster: Literal["auto", "true", "false"] = Field(
        "auto",
        description="Whether redis_url is a node of a Redis Cluster (the other nodes are then"
        " discovered): auto asks the server (INFO cluster), true or false say so.",
    )
    redis_slot_tags: int = Field(
        DEFAULT_SLOT_TAGS,
        ge=1,
        le=16384,
        description="Hash tags the keys are spread over, evenly over a cluster's slots (a batch"
        " writes once per tag it touches). Changing it moves every key: reset the store.",
    )
    redis_wait_replicas: int | None = Field(
        None,
        ge=0,
        description="Replicas that must acknowledge a batch's write (WAIT) before its offsets are"
        " committed (None: 1 where every master has a replica at start, else 0).",
    )
    redis_wait_timeout_ms: int = Field(
        2000,
        ge=1,
        description="How long a write waits for the replicas; then the batch is retried.",
    )

    # -- processing ----------------------------------------------------------------------------
    batch_size: int = Field(
        2000,
        ge=1,
        description="Most events per micro-batch: a batch is what arrived while the previous"
        " one was processed, up to this many.",
    )
    parse_processes: int = Field(
        0,
        ge=0,
        description="Parser processes per worker (0: parse in the worker process). One helps"
        " only when the worker has a core to spare: shipping events to it costs the worker"
        " nearly what parsing them does.",
    )
    scorer: str = Field(
        DEFAULT_SCORER,
        description="lbla, nnl-pr, nnl-av, ccr, online, batch or ensemble (`lookaround replay"
        " --help` says what each is).",
    )
    history: int = Field(DEFAULT_HISTORY, ge=1, description="Intervals kept per page.")
    neighbours: int = Field(DEFAULT_NEIGHBOURS, ge=1, description="Related pages per page.")
    drift_similarity: float = Field(
        DEFAULT_DRIFT_SIMILARITY,
        ge=-1.0,
        le=1.0,
        description="A page's related pages are searched again when the cosine similarity of"
        " its embedding to the one they were found with falls below this (1: on every change).",
    )
    drift_growth: float = Field(
        DEFAULT_DRIFT_GROWTH,
        ge=1.0,
        description="A page whose embedding changed, however little, has its related pages"
        " searched again once the index has grown this much since they were found.",
    )
    embedding_dim: int = Field(
        DEFAULT_EMBEDDING_DIM, ge=2, description="Dimension of the events' embeddings."
    )
    max_outlinks: int = Field(
        DEFAULT_MAX_OUTLINKS,
        ge=1,
        description="An event with more outlinks is rejected whole (dead-letter topic).",
    )
    max_event_bytes: int = Field(
        DEFAULT_MAX_EVENT_BYTES,
        ge=1024,
        description="Largest event accepted, in bytes (`produce` skips a larger line, the"
        " worker dead-letters it).",
    )
    max_url_length: int = Field(
        DEFAULT_MAX_URL_LENGTH,
        ge=16,
        description="Longest page URL accepted, in characters (a longer outlink is dropped).",
    )
    earliest_fetch: datetime = Field(
        datetime.fromtimestamp(DEFAULT_EARLIEST_FETCH, UTC),
        description="Earliest fetched_at accepted (an event before it is rejected).",
    )
    max_fetch_ahead_seconds: float = Field(
        DEFAULT_MAX_AHEAD_SECONDS,
        ge=0,
        description="How far past the worker's clock a fetched_at may lie (rejected beyond).",
    )
    compact_store: bool = Field(
        DEFAULT_COMPACT_STORE,
        description="Store stats, related-page weights and look-around feature rows in half"
        " precision (about 300 B less a page in Redis); scores move by what half precision"
        " moves them. Every worker, and a replay meant to match them, must agree.",
    )
    fetch_budget_per_day: float | None = Field(
        None,
        gt=0,
        description="Fetches a day the crawler spends on the pages this worker scores: "
        "next_fetch_at then follows the square-root allocation of that budget (None: when "
        "one new link is expected).",
    )

    # -- models --------------------------------------------------------------------------------
    registry_dir: Path = Field(Path("models"), description="Model registry (a shared volume).")
    registry_poll_seconds: float = Field(
        DEFAULT_POLL_SECONDS, gt=0, description="How often to look for models."
    )
    registry_key: SecretStr | None = Field(
        None,
        description="HMAC key (secret) that signs registry artifacts and is checked before one"
        " is loaded; the same where models are trained and served. Unset: the user's own key"
        " (~/.config/lookaround/registry.key, made on first use); none to be had: nothing is"
        " loaded.",
    )

    # -- operations ----------------------------------------------------------------------------
    web_host: str = Field("0.0.0.0", description="Address /health and /metrics listen on.")
    web_port: int = Field(
        6066,
        ge=1,
        le=65535,
        description="Port of /health and /metrics; each worker on a host needs its own.",
    )
    health_broker_seconds: float = Field(
        10.0,
        gt=0,
        description="/health is 503 once the broker has not answered a metadata request for this"
        " long (probed every few seconds).",
    )
    health_stall_seconds: float = Field(
        60.0,
        gt=0,
        description="/health is 503 once events are waiting (a partition with lag) and none has"
        " been committed for this long.",
    )
    stop_timeout_seconds: float = Field(
        8.0,
        gt=0,
        description="Longest a SIGTERM'd worker takes to stop; then it exits anyway (nothing is"
        " committed past an unprocessed event, so the rest is redelivered).",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="DEBUG, INFO, WARNING or ERROR."
    )
    log_format: Literal["json", "text"] = Field(
        "json", description="json (one object per line) or text."
    )

    @field_validator("kafka_bootstrap")
    @classmethod
    def _hosts(cls, value: str) -> str:
        for host in value.split(","):
            name, _, port = host.strip().rpartition(":")
            if not name or not port.isdigit():
                raise ValueError(f"expected host:port, got {host!r}")
        return value

    @field_validator("redis_key_prefix")
    @classmethod
    def _no_braces(cls, value: str) -> str:
        if "{" in value or "}" in value:
            raise ValueError("a Redis key prefix cannot hold { or } (the keys' hash tags use them)")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("redis_url must start with redis://, rediss:// or unix://")
        return value

    def event_limits(self) -> EventLimits:
        """The event contract's limits these settings set."""
        earliest = self.earliest_fetch
        if earliest.tzinfo is None:
            earliest = earliest.replace(tzinfo=UTC)
        return EventLimits(
            max_url_length=self.max_url_length,
            earliest=earliest.timestamp(),
            max_ahead_seconds=self.max_fetch_ahead_seconds,
            max_event_bytes=self.max_event_bytes,
        )

    def public_dict(self) -> dict[str, Any]:
        """Every setting, secrets masked: what a log line or the health endpoint may show.
        A password given inside a URL (``redis://:pw@host``) is masked too."""
        out = self.model_dump(mode="json")
        for name, value in out.items():
            if isinstance(getattr(self, name), SecretStr) and value is not None:
                out[name] = "**********"
            elif isinstance(value, str):
                out[name] = mask_userinfo(value)
        return out
