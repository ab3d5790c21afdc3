"""The event contract: what a fetched-page event must be to be accepted, checked at the boundary.

A fetched-page event is what a crawler knows right after fetching a page. Validation never
raises past `parse_event`'s caller: every problem becomes an `EventError` naming the field and
the reason, so a worker can count it, route it to a dead-letter sink and carry on.

``fetched_at`` is ISO-8601 or epoch seconds; a time without a timezone is taken as UTC.

>>> event = parse_event(b'{"url": "HTTPS://Example.com/a#x", "fetched_at": "2026-01-05T10:00:00",'
...                     b' "outlinks": ["https://example.com/b", "mailto:me@example.com"]}')
>>> event.url, event.fetched_at.isoformat(), event.outlinks, event.dropped_outlinks
('https://example.com/a', '2026-01-05T10:00:00+00:00', ['https://example.com/b'], 1)
>>> try:
...     parse_event(b'{"url": "ftp://example.com/", "fetched_at": 0, "outlinks": []}')
... except EventError as err:
...     print(err.field, "|", err.reason)
url | not an http(s) URL: 'ftp://example.com/'

An accepted event becomes the core's compact record, `online.fetch.Fetch`; what lookaround
publishes in return is `online.priority_update.PriorityUpdate`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from online.links import InvalidURL, LinkInfo, link_info

DEFAULT_EMBEDDING_DIM = 192
DEFAULT_MAX_OUTLINKS = 100_000
DEFAULT_MAX_URL_LENGTH = 8192
#: Largest event accepted, in bytes of JSON: under the 1 MiB a Kafka producer sends by default,
#: and 10x the largest event of the data sets in ../shared.
DEFAULT_MAX_EVENT_BYTES = 1_000_000
#: 1990-01-01T00:00:00Z: no web page was fetched before it.
DEFAULT_EARLIEST_FETCH = 631152000.0
#: A fetch time may lie at most this far after the clock of the process that reads it.
DEFAULT_MAX_AHEAD_SECONDS = 86400.0
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT64 = (-(2**63), 2**63 - 1)

#: The accepted range of every numeric field, inclusive: a value outside it is rejected naming
#: the field and the bound. The ranges are far beyond any real page and far inside what float32
#: page state and float64 features hold, so no accepted value can overflow a feature, a model
#: or a score (sizes of a terabyte, 10^12 inlinks, ranks and quality of magnitude 10^6).
NUMBER_BOUNDS: dict[str, tuple[float, float]] = {
    "content_size": (0, 1e12),
    "text_size": (0, 1e12),
    "text_quality": (-1e6, 1e6),
    "inlinks_internal": (0, 1e12),
    "inlinks_external": (0, 1e12),
    "pagerank": (-1e6, 1e6),
    "trustrank": (-1e6, 1e6),
}


@dataclass(frozen=True, slots=True)
class EventLimits:
    """The configurable limits of the contract (settings ``max_url_length``,
    ``earliest_fetch``, ``max_fetch_ahead_seconds``, ``max_event_bytes``).

    An event (JSON text) longer than ``max_event_bytes`` is rejected whole (field ``$``).
    ``fetched_at`` must lie in [``earliest``, the reader's clock + ``max_ahead_seconds``]
    (epoch seconds); the page URL may have at most ``max_url_length`` characters (a longer
    outlink is dropped and counted as malformed).
    """

    max_url_length: int = DEFAULT_MAX_URL_LENGTH
    earliest: float = DEFAULT_EARLIEST_FETCH
    max_ahead_seconds: float = DEFAULT_MAX_AHEAD_SECONDS
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES

    def latest(self) -> float:
        """The latest fetch time accepted now (epoch seconds)."""
        return time.time() + self.max_ahead_seconds


DEFAULT_LIMITS = EventLimits()


def _range(name: str) -> dict[str, float]:
    """A field's bounds as pydantic constraints (so the JSON Schema shows them too)."""
    low, high = NUMBER_BOUNDS[name]
    return {"ge": low, "le": high}


class EventError(ValueError):
    """A rejected event: which field, and why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class FetchedPage(BaseModel):
    """One fetch of one page, as the crawler reports it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    url: str = Field(description="Absolute http(s) URL of the fetched page; normalised on input.")
    fetched_at: datetime = Field(
        description="When the page was fetched: ISO-8601 or epoch seconds; no timezone means UTC."
    )
    outlinks: list[str] = Field(
        description="Absolute URLs the page links to (may be empty); malformed entries are "
        "dropped and counted, duplicates collapse."
    )
    status: int = Field(
        200, ge=100, le=599, strict=True, description="HTTP status (a JSON integer)."
    )
    content_size: int | None = Field(None, **_range("content_size"), description="Bytes.")
    text_size: int | None = Field(
        None, **_range("text_size"), description="Characters of extracted text."
    )
    text_quality: float | None = Field(
        None, **_range("text_quality"), description="Text quality score."
    )
    content_digest: str | None = Field(None, description="Digest of the content without links.")
    embedding: list[float] | None = Field(
        None, description="Semantic vector of the page; dimension fixed per deployment."
    )
    text: str | None = Field(None, description="Page text, embedded when no embedding is given.")
    inlinks_internal: int | None = Field(None, **_range("inlinks_internal"))
    inlinks_external: int | None = Field(None, **_range("inlinks_external"))
    pagerank: float | None = Field(None, **_range("pagerank"))
    trustrank: float | None = Field(None, **_range("trustrank"))
    crawl: int | None = Field(
        None,
        ge=_INT64[0],
        le=_INT64[1],
        description="Crawl round, passed through for evaluation (a 64-bit integer).",
    )

    _dropped_outlinks: int = PrivateAttr(default=0)
    _link_summary: tuple[dict[int, bool], int] | None = PrivateAttr(default=None)
    _vector: np.ndarray | None = PrivateAttr(default=None)

    @property
    def dropped_outlinks(self) -> int:
        """Malformed entries removed from ``outlinks``."""
        return self._dropped_outlinks

    @property
    def outlink_infos(self) -> tuple[LinkInfo, ...]:
        """Parsed outlinks."""
        return tuple(link_info(u) for u in self.outlinks)

    @property
    def vector(self) -> np.ndarray | None:
        """The embedding as float32 (not normalised), or None."""
        if self._vector is None and self.embedding is not None:
            self._vector = np.asarray(self.embedding, dtype=np.float32)
        return self._vector

    @property
    def ok(self) -> bool:
        """A 2xx fetch: only those change the outlink history."""
        return 200 <= self.status < 300

    @property
    def timestamp(self) -> float:
        """Epoch seconds of ``fetched_at``."""
        return self.fetched_at.timestamp()

    @field_validator("url", mode="before")
    @classmethod
    def _normalise_url(cls, value: Any, info: ValidationInfo) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {type(value).__name__}")
        limit = _limits(info).max_url_length
        if len(value) > limit:
            raise ValueError(f"{len(value):,} characters, more than the maximum of {limit:,}")
        try:
            return link_info(value).url
        except InvalidURL as exc:
            raise ValueError(str(exc)) from None

    @field_validator("fetched_at", mode="after")
    @classmethod
    def _aware_utc(cls, value: datetime, info: ValidationInfo) -> datetime:
        try:
            value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
            stamp = value.timestamp()
        except (OverflowError, ValueError):  # e.g. 0001-01-01T00:00:00+01:00 is year 0 in UTC
            limits = _limits(info)
            if value.year < 2000:
                earliest = iso_utc(limits.earliest)
                why = f"{value.isoformat()} is before the earliest accepted {earliest}"
                raise ValueError(why) from None
            raise ValueError(_future(value.isoformat(), limits)) from None
        _check_time(stamp, _limits(info))
        return value

    @field_validator("fetched_at", mode="before")
    @classmethod
    def _no_bool_time(cls, value: Any) -> Any:
        if isinstance(value, bool) or value is None:
            raise ValueError("expected ISO-8601 text or epoch seconds")
        return value

    @field_validator("outlinks", mode="wrap")
    @classmethod
    def _check_outlinks(cls, value: Any, handler: Any, info: ValidationInfo) -> list[str]:
        """Normalise, drop malformed entries, and fingerprint the links in the same pass.

        A wrap validator: the list is checked here once, not again item by item after.
        """
        if not isinstance(value, list):
            raise ValueError(f"expected a list of URLs, got {type(value).__name__}")
        context = info.context if info.context is not None else {}
        limit = context.get("max_outlinks", DEFAULT_MAX_OUTLINKS)
        if len(value) > limit:
            raise ValueError(f"{len(value)} outlinks, more than the maximum of {limit}")
        page_url = info.data.get("url")
        page = link_info(page_url) if page_url is not None else None
        kept, context["dropped_outlinks"] = collect_links(value, _limits(info).max_url_length)
        context["links"] = summarise_links(page, kept.values())
        return list(kept)

    @field_validator("embedding", mode="wrap")
    @classmethod
    def _check_embedding(cls, value: Any, handler: Any, info: ValidationInfo) -> list[float] | None:
        """Checked as one float32 array (dimension, finiteness), not float by float."""
        if value is None:
            return None
        if not isinstance(value, list | tuple):
            raise ValueError(f"expected a list of numbers, got {type(value).__name__}")
        context = info.context if info.context is not None else {}
        dim = context.get("embedding_dim", DEFAULT_EMBEDDING_DIM)
        context["vector"] = _checked_vector(value, dim)
        return value if isinstance(value, list) else list(value)

    @field_validator("status", mode="before")
    @classmethod
    def _an_integer(cls, value: Any) -> Any:
        """A JSON integer: ``"200"``, ``200.0`` or ``true`` is a producer's mistake."""
        if type(value) is not int:
            raise ValueError(f"expected an integer, got {type(value).__name__}")
        return value

    @field_validator(*NUMBER_BOUNDS, "crawl", mode="before")
    @classmethod
    def _a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """Numbers only: ``"12"`` or ``true`` is a mistake in the producer, not a count; and a
        number outside its range is named with the range, whatever its type."""
        if isinstance(value, str | bool):
            raise ValueError(f"expected a number, got {type(value).__name__}")
        bounds = NUMBER_BOUNDS.get(info.field_name or "")
        if bounds is not None and isinstance(value, int | float):
            _check_range(value, bounds)
        return value

    @field_validator(*NUMBER_BOUNDS, mode="after")
    @classmethod
    def _bounded(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is None:
            return value
        _check_range(value, NUMBER_BOUNDS[info.field_name or ""])
        return value


def _check_range(value: float, bounds: tuple[float, float]) -> None:
    if not math.isfinite(value):
        raise ValueError("must be finite")
    low, high = bounds
    if not low <= value <= high:
        raise ValueError(f"{value!r} is outside the accepted range [{low:g}, {high:g}]")


def _limits(info: ValidationInfo) -> EventLimits:
    context = info.context if info.context is not None else {}
    return context.get("limits", DEFAULT_LIMITS)


def _check_time(stamp: float, limits: EventLimits) -> None:
    """Raise ValueError unless ``stamp`` lies in the accepted window of fetch times."""
    if stamp < limits.earliest:
        raise ValueError(
            f"{iso_utc(stamp)} is before the earliest accepted {iso_utc(limits.earliest)}"
        )
    latest = limits.latest()
    if stamp > latest:
        raise ValueError(_future(iso_utc(stamp), limits))


def _future(when: str, limits: EventLimits) -> str:
    return (
        f"{when} is in the future: more than {limits.max_ahead_seconds:g} s after the clock "
        "of the process reading it"
    )


def iso_utc(stamp: float) -> str:
    """An epoch time as ISO-8601 UTC text ending in ``Z`` (microseconds where it has them);
    a time no calendar date can hold as seconds from the epoch, for messages."""
    try:
        return datetime.fromtimestamp(stamp, UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return f"{stamp:g} s from the epoch"


def parse_event(
    raw: bytes | str | Mapping[str, Any],
    *,
    embedding_dim: int = DEFAULT_EMBEDDING_DIM,
    max_outlinks: int = DEFAULT_MAX_OUTLINKS,
    limits: EventLimits = DEFAULT_LIMITS,
) -> FetchedPage:
    """Validate one event (JSON bytes/text or a mapping). Raises EventError naming the field."""
    context: dict[str, Any] = {
        "embedding_dim": embedding_dim,
        "max_outlinks": max_outlinks,
        "limits": limits,
    }
    try:
        if isinstance(raw, Mapping):
            event = FetchedPage.model_validate(raw, context=context)
        else:
            try:
                data = orjson.loads(raw)  # the fast path
            except orjson.JSONDecodeError:
                # Pydantic's parser names the field where orjson cannot (NaN in an embedding).
                event = FetchedPage.model_validate_json(raw, context=context)
            else:
                event = FetchedPage.model_validate(data, context=context)
    except ValidationError as exc:
        raise _event_error(exc) from None
    event._dropped_outlinks = context.get("dropped_outlinks", 0)
    event._link_summary = context.get("links")
    event._vector = context.get("vector")
    return event


def _checked_vector(value: list | tuple, dim: int) -> np.ndarray:
    """The embedding as float32 after the contract's checks; raises ValueError with the reason.

    Only JSON numbers count: a string or a boolean is rejected, not converted, and a nested
    list is named as such (its outer length could otherwise pass for the dimension)."""
    for at, item in enumerate(value):
        if type(item) is bool or not isinstance(item, int | float):
            what = "a nested list" if isinstance(item, list | tuple) else type(item).__name__
            raise ValueError(f"expected a flat list of numbers, item {at} is {what}")
    try:
        vector = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ValueError("expected a list of numbers") from None
    if vector.shape != (dim,):
        raise ValueError(f"dimension {len(value)}, expected {dim}")
    if not np.isfinite(vector).all():
        raise ValueError("contains NaN or infinity")
    if np.abs(vector).max() > _FLOAT32_MAX:
        raise ValueError("has a value beyond float32 range")
    if not vector.any():
        raise ValueError("is the zero vector")
    single = vector.astype(np.float32)
    if not single.any():  # e.g. all values near 1e-46: zero once stored as float32
        raise ValueError("is the zero vector in float32 (every value below float32's range)")
    return single


def collect_links(
    value: list, max_length: int = DEFAULT_MAX_URL_LENGTH
) -> tuple[dict[str, LinkInfo], int]:
    """(distinct normalised links, first occurrence kept; number of malformed entries, links
    longer than ``max_length`` characters among them)."""
    kept: dict[str, LinkInfo] = {}
    malformed = 0
    for raw in value:
        if isinstance(raw, str) and len(raw) > max_length:
            malformed += 1
            continue
        try:
            link = link_info(raw)
        except InvalidURL:
            malformed += 1
            continue
        kept.setdefault(link.url, link)
    return kept, malformed


def summarise_links(
    page: LinkInfo | None, links: Iterable[LinkInfo]
) -> tuple[dict[int, bool], int]:
    """(internal flag per outlink fingerprint, number of internal outlinks) of unique links."""
    internal_by_fp: dict[int, bool] = {}
    n_internal = 0
    for link in links:
        internal = page is not None and link.site == page.site and link.scheme == page.scheme
        n_internal += internal
        internal_by_fp.setdefault(link.fingerprint, internal)
    return internal_by_fp, n_internal


def _event_error(exc: ValidationError) -> EventError:
    first = exc.errors(include_url=False)[0]
    if first["type"] == "json_invalid":
        return EventError("$", f"not JSON: {first['msg']}")
    if first["type"] == "model_type":
        return EventError("$", "not a JSON object")
    field = ".".join(str(part) for part in first["loc"]) or "$"
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return EventError(field, message)


def utc_now() -> datetime:
    """Timezone-aware now; the single clock of the package, injectable in callers."""
    return datetime.now(UTC)
