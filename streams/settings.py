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
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from online.events import DEFAULT_EMBEDDING_DIM, DEFAULT_MAX_OUTLINKS
from online.history import DEFAULT_HISTORY
from online.scoring import DEFAULT_SCORER

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
    kafka_bootstrap: str = Field("127.0.0.1:9092", description="host:port[,host:port...]")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: Path | None = None
    kafka_ssl_certfile: Path | None = None
    kafka_ssl_keyfile: Path | None = None

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
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="redis:// or rediss:// (TLS)")
    redis_username: str | None = None
    redis_password: SecretStr | None = None
    redis_ssl_cafile: Path | None = None
    redis_key_prefix: str = Field("lookaround:", description="Prefix of every key we write.")
    redis_state_ttl_seconds: int | None = Field(
        None, ge=1, description="Forget pages not fetched for this long (None: keep)."
    )

    # -- processing ----------------------------------------------------------------------------
    batch_size: int = Field(
        2000,
        ge=1,
        description="Most events per micro-batch: a batch is what arrived while the previous"
        " one was processed, up to this many.",
    )
    batch_within_seconds: float = Field(
        0.05,
        gt=0,
        description="Longest wait to fill a chunk (stream.take) for an idle worker (bounds"
        " latency at low rates).",
    )
    parse_processes: int = Field(
        0,
        ge=0,
        description="Parser processes per worker (0: parse in the worker process). One helps"
        " only when the worker has a core to spare: shipping events to it costs the worker"
        " nearly what parsing them does.",
    )
    scorer: str = DEFAULT_SCORER
    history: int = Field(DEFAULT_HISTORY, ge=1)
    neighbours: int = Field(30, ge=1)
    embedding_dim: int = Field(DEFAULT_EMBEDDING_DIM, ge=2)
    max_outlinks: int = Field(DEFAULT_MAX_OUTLINKS, ge=1)

    # -- models --------------------------------------------------------------------------------
    registry_dir: Path = Field(Path("models"), description="Model registry (a shared volume).")
    registry_poll_seconds: float = Field(30.0, gt=0, description="How often to look for models.")

    # -- operations ----------------------------------------------------------------------------
    web_host: str = "0.0.0.0"
    web_port: int = Field(6066, ge=1, le=65535, description="Metrics and health endpoint.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["json", "text"] = "json"

    @field_validator("kafka_bootstrap")
    @classmethod
    def _hosts(cls, value: str) -> str:
        for host in value.split(","):
            name, _, port = host.strip().rpartition(":")
            if not name or not port.isdigit():
                raise ValueError(f"expected host:port, got {host!r}")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("redis_url must start with redis://, rediss:// or unix://")
        return value

    def public_dict(self) -> dict[str, Any]:
        """Every setting, secrets masked: what a log line or the health endpoint may show."""
        out = self.model_dump(mode="json")
        for name, value in out.items():
            if isinstance(getattr(self, name), SecretStr) and value is not None:
                out[name] = "**********"
        return out
