"""Structured logs: one JSON object per line (or plain text), never a secret.

Extra fields given with ``log.info(msg, extra={...})`` become keys of the JSON object. Settings
are only ever logged through `Settings.public_dict`, which masks secrets.

>>> import logging
>>> record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("you",), None)
>>> record.attempt = 2
>>> import orjson; doc = orjson.loads(JsonFormatter().format(record))
>>> doc["message"], doc["attempt"], doc["level"]
('hello you', 2, 'INFO')
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

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
        return orjson.dumps(doc, default=str).decode()


def logging_config(level: str = "INFO", fmt: str = "json") -> dict[str, Any]:
    """A `logging.config.dictConfig` dict (Faust's worker takes it as ``logging_config``)."""
    formatter = (
        {"()": f"{__name__}.JsonFormatter"}
        if fmt == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
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
            }
        },
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {"aiokafka": {"level": "WARNING"}, "kafka": {"level": "WARNING"}},
    }


def setup_logging(level: str = "INFO", fmt: str = "json") -> None:
    import logging.config

    logging.config.dictConfig(logging_config(level, fmt))
