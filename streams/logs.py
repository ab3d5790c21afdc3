"""Structured logs: one JSON object per line (or plain text), never a secret.

Extra fields given with ``log.info(msg, extra={...})`` become keys of the JSON object. Settings
are only ever logged through `Settings.public_dict`, which masks secrets; and whatever a line
says, the userinfo of a URL in it (``redis://:password@host``) is masked by the formatter, so
a password inside a URL setting or an error message never reaches the log.

>>> import logging
>>> record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("you",), None)
>>> record.attempt = 2
>>> import orjson; doc = orjson.loads(JsonFormatter().format(record))
>>> doc["message"], doc["attempt"], doc["level"]
('hello you', 2, 'INFO')
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from online.links import mask_userinfo

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return mask_userinfo(orjson.dumps(doc, default=str).decode())


class TextFormatter(logging.Formatter):
    """The plain text format, URL userinfo masked like `JsonFormatter`'s."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_userinfo(super().format(record))


def logging_config(level: str = "INFO", fmt: str = "json") -> dict[str, Any]:
    """A `logging.config.dictConfig` dict (Faust's worker takes it as ``logging_config``)."""
    formatter = (
        {"()": f"{__name__}.JsonFormatter"}
        if fmt == "json"
        else {
            "()": f"{__name__}.TextFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        }
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "main",
                "stream": "ext://sys.stderr",
                "filters": ["repeats"],
            }
        },
        "filters": {"repeats": {"()": f"{__name__}.RepeatFilter"}},
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {"aiokafka": {"level": "WARNING"}, "kafka": {"level": "WARNING"}},
    }


def setup_logging(level: str = "INFO", fmt: str = "json") -> None:
    import logging.config

    logging.config.dictConfig(logging_config(level, fmt))


class Throttle:
    """When to log a condition that may repeat thousands of times a minute (a broker that is
    gone, a flood of bad messages): its first occurrence, then at most one reminder every
    ``every`` seconds saying how many were not logged. `reset` (the condition ended) makes
    the next occurrence a state change again, logged at once.

    >>> now = [0.0]
    >>> t = Throttle(every=60, clock=lambda: now[0])
    >>> [t.due("x") for _ in range(3)]
    [(True, 0), (False, 1), (False, 2)]
    >>> now[0] = 61; t.due("x")
    (True, 2)
    >>> t.reset("x"); t.due("x")
    (True, 0)
    """

    def __init__(self, every: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def due(self, key: str) -> tuple[bool, int]:
        """Whether to log ``key``'s occurrence now, and how many were skipped before it."""
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.every:
            self._skipped[key] = self._skipped.get(key, 0) + 1
            return False, self._skipped[key]
        self._last[key] = now
        return True, self._skipped.pop(key, 0)

    def active(self, key: str) -> bool:
        return key in self._last

    def reset(self, key: str) -> None:
        self._last.pop(key, None)
        self._skipped.pop(key, None)


#: Loggers of the Kafka clients: they log every failed attempt (a broker that is gone: one
#: line per retry, many a second).
THROTTLED_LOGGERS = ("aiokafka", "kafka", "faust", "mode")


class RepeatFilter(logging.Filter):
    """Bounded logs while something keeps failing: a warning or error of the Kafka clients is
    logged the first time, then at most once a minute per logger and message, with how many
    like it were not logged. The worker logs the state changes itself (broker gone, back)."""

    def __init__(self, every: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.throttle = Throttle(every, clock)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith(THROTTLED_LOGGERS):
            return True
        due, skipped = self.throttle.due(f"{record.name}:{record.msg}")
        if due and skipped:
            record.not_logged = skipped
            record.msg = f"{record.msg} [{skipped} like it not logged in the last minute]"
        return due
