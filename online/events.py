"""The event contract: fetched-page events in, priority updates out, validated at the boundary.

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
"""

from __future__ import annotations

import math
import operator
import struct
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
import orjson
import xxhash
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from online.fastparse import FastFetch, unit_vector_bytes
from online.kernels import SlotRecord
from online.links import InvalidURL, LinkInfo, canonical_summary, link_info

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
                earliest = _iso(limits.earliest)
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
        kept, context["dropped_outlinks"] = _collect_links(value, _limits(info).max_url_length)
        context["links"] = _summarise_links(page, kept.values())
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
        raise ValueError(f"{_iso(stamp)} is before the earliest accepted {_iso(limits.earliest)}")
    latest = limits.latest()
    if stamp > latest:
        raise ValueError(_future(_iso(stamp), limits))


def _future(when: str, limits: EventLimits) -> str:
    return (
        f"{when} is in the future: more than {limits.max_ahead_seconds:g} s after the clock "
        "of the process reading it"
    )


def _iso(stamp: float) -> str:
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


@dataclass(frozen=True, slots=True)
class Fetch:
    """A validated fetch in the compact form the core works on.

    Numeric page values are rounded to float32, the precision page state is kept at.

    Outlinks are reduced to what the history needs (sorted unique 32-bit fingerprints with an
    internal flag each) and the embedding to a unit float32 vector, all as bytes: the record
    is cheap to keep, to compare and to pass between processes.
    """

    url: str
    page_id: int
    timestamp: float
    status: int = 200
    crawl: int | None = None
    content_size: float | None = None
    text_size: float | None = None
    text_quality: float | None = None
    internal_outlinks: int = 0
    external_outlinks: int = 0
    inlinks_internal: float | None = None
    inlinks_external: float | None = None
    pagerank: float | None = None
    trustrank: float | None = None
    content_digest_fp: int = 0
    outlink_fps: bytes = b""
    outlink_internal: bytes = b""
    vector: bytes | None = None
    source_fp: int = 0
    text: str | None = None
    dropped_outlinks: int = 0

    @property
    def ok(self) -> bool:
        """A 2xx fetch: only those change the outlink history."""
        return 200 <= self.status < 300

    @property
    def fetched_at(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp, UTC)

    def __reduce__(self) -> tuple:
        # Positional re-construction: much cheaper than the dataclass default for slots.
        return (_new_fetch, _fetch_values(self))

    @property
    def fingerprints(self) -> np.ndarray:
        return np.frombuffer(self.outlink_fps, dtype="<u4")

    @property
    def internal_flags(self) -> np.ndarray:
        return np.frombuffer(self.outlink_internal, dtype=bool)

    def unit_vector(self) -> np.ndarray | None:
        if self.vector is None:
            return None
        return np.frombuffer(self.vector, dtype="<f4")


_FETCH_FIELDS = tuple(Fetch.__dataclass_fields__)
_fetch_values = operator.attrgetter(*_FETCH_FIELDS)


#: ``Fetch(*values)`` at a fraction of the cost, for the parser and for unpickling batches:
#: each slot's own setter is called from compiled code, the way the frozen dataclass's
#: ``__init__`` stores each field (same fields, same result).
_new_fetch = SlotRecord(Fetch, _FETCH_FIELDS)


def fetch_columns(fetches: list[Fetch]) -> tuple[tuple, ...]:
    """Fetches as one tuple per field: what a batch pickles (a few long tuples of plain values
    pickle in about a third of the time of the records one by one)."""
    return tuple(zip(*map(_fetch_values, fetches), strict=True))


def fetches_from_columns(columns: tuple[tuple, ...]) -> list[Fetch]:
    """Inverse of `fetch_columns`."""
    return list(map(_new_fetch, *columns)) if columns else []


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


def _collect_links(
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


def _summarise_links(
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


def prepare(event: FetchedPage) -> Fetch:
    """The compact `Fetch` of a validated event."""
    page = link_info(event.url)
    if event._link_summary is None:  # built directly, not through parse_event
        event._link_summary = _summarise_links(page, event.outlink_infos)
    fps, n_internal = event._link_summary
    order = sorted(fps)
    vector = source_fp = None
    if event.vector is not None:
        vector = _unit_bytes(event.vector)
        source_fp = xxhash.xxh32_intdigest(vector) or 1
    elif event.text:
        source_fp = xxhash.xxh32_intdigest(event.text.encode("utf-8"), seed=1) or 1
    return Fetch(
        url=event.url,
        page_id=page.page_id,
        timestamp=event.timestamp,
        status=event.status,
        crawl=event.crawl,
        content_size=_f32(event.content_size),
        text_size=_f32(event.text_size),
        text_quality=_f32(event.text_quality),
        internal_outlinks=n_internal,
        external_outlinks=len(event.outlinks) - n_internal,
        inlinks_internal=_f32(event.inlinks_internal),
        inlinks_external=_f32(event.inlinks_external),
        pagerank=_f32(event.pagerank),
        trustrank=_f32(event.trustrank),
        content_digest_fp=(
            xxhash.xxh32_intdigest(event.content_digest.encode("utf-8")) or 1
            if event.content_digest
            else 0
        ),
        outlink_fps=np.fromiter(order, dtype="<u4", count=len(order)).tobytes(),
        outlink_internal=bytes(map(fps.__getitem__, order)),
        vector=vector,
        source_fp=source_fp or 0,
        text=event.text if vector is None else None,
        dropped_outlinks=event.dropped_outlinks,
    )


def _unit_bytes(raw: np.ndarray) -> bytes:
    """A float32 vector scaled to unit length, as little-endian bytes (norm taken in float64,
    summed in order: the fast path's kernel does the same arithmetic)."""
    return unit_vector_bytes(np.ascontiguousarray(raw, dtype=np.float32))


_F32 = struct.Struct("<f")


def _f32(value: float | None) -> float | None:
    """Round to float32, the precision page state is kept at (so stores lose nothing)."""
    if value is None:
        return None
    try:
        return _F32.unpack(_F32.pack(value))[0]
    except OverflowError:  # beyond float32: the float32 infinity of the right sign
        return math.copysign(math.inf, value)


def parse_fetch(
    raw: bytes | str | Mapping[str, Any],
    *,
    embedding_dim: int = DEFAULT_EMBEDDING_DIM,
    max_outlinks: int = DEFAULT_MAX_OUTLINKS,
    limits: EventLimits = DEFAULT_LIMITS,
) -> Fetch:
    """`parse_event` then `prepare`: raw input to the core's record. Raises EventError.

    An event whose fields all have their plain expected types takes a direct path (no model,
    outlinks recognised as canonical in bulk), several times faster; anything else, valid or
    not, goes through `parse_event`, which stays the one judge of acceptance and of errors.
    """
    data: object = raw
    if type(raw) is bytes or not isinstance(raw, Mapping):  # bytes first: no ABC check
        if len(raw) > limits.max_event_bytes:  # type: ignore[arg-type]
            size, most = len(raw), limits.max_event_bytes  # type: ignore[arg-type]
            raise EventError("$", f"{size:,} bytes, more than the maximum of {most:,}")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
    if type(data) is dict:
        fetch = _fast_fetch(
            data,
            embedding_dim,
            max_outlinks,
            limits.max_url_length,
            limits.earliest,
            limits.latest(),
        )
        if fetch is not None:
            return fetch
    event = parse_event(raw, embedding_dim=embedding_dim, max_outlinks=max_outlinks, limits=limits)
    return prepare(event)


def _general_links(outlinks: list, page: LinkInfo) -> tuple[bytes, bytes, int, int, int]:
    """The validator's own outlink loop, for lists the compiled fast path cannot take whole:
    (sorted fingerprints, their flags, internal count, distinct links, malformed entries)."""
    kept, dropped = _collect_links(outlinks)
    by_fp, n_internal = _summarise_links(page, kept.values())
    order = sorted(by_fp)
    fps = np.fromiter(order, dtype="<u4", count=len(order)).tobytes()
    return fps, bytes(map(by_fp.__getitem__, order)), n_internal, len(kept), dropped


#: ``_fast_fetch(data, embedding_dim, max_outlinks, max_url_length, earliest, latest) -> Fetch |
#: None``: the compiled fast path (`online.fastparse.FastFetch`). None means "not sure", never
#: "invalid": the caller then asks `parse_event`. Whatever it accepts equals
#: ``prepare(parse_event(raw))``. It declines every number outside `NUMBER_BOUNDS`.
_fast_fetch = FastFetch(
    _new_fetch,
    link_info,
    canonical_summary,
    _general_links,
    tuple(float(NUMBER_BOUNDS[name][0]) for name in FastFetch.number_fields()),
    tuple(float(NUMBER_BOUNDS[name][1]) for name in FastFetch.number_fields()),
)


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


class ScorerRef(BaseModel):
    """Which scorer produced a priority, so a crawler can audit and compare."""

    name: str
    version: str
    models: dict[str, str] = Field(
        default_factory=dict,
        description="Versions of the learned models behind the score (online, batch).",
    )


class RelatedTo(BaseModel):
    """The fetch that announced a related update: a sibling of the page showed new links."""

    url: str = Field(description="The sibling whose fetch showed new links.")
    fetched_at: datetime = Field(description="That fetch.")
    new_links: int = Field(ge=1, description="The new outlinks it showed.")


class PriorityUpdate(BaseModel):
    """What lookaround tells the crawler after each accepted fetch, and (``kind`` related)
    for a page whose sibling's fetch showed new links."""

    model_config = ConfigDict(extra="allow")

    url: str = Field(description="Normalised URL of the page.")
    fetched_at: datetime = Field(description="The fetch this score follows.")
    scored_at: datetime = Field(description="When the score was computed (UTC).")
    score: float = Field(description="Recrawl priority: higher = recrawl sooner.")
    expected_new_internal: float | None = Field(
        description="Expected new internal outlinks at the next fetch; null when the scorer "
        "makes no count estimate (ccr)."
    )
    expected_new_external: float | None = Field(
        description="Expected new external outlinks at the next fetch; null as above."
    )
    p_new: float = Field(ge=0.0, le=1.0, description="P(>= 1 new outlink at the next fetch).")
    rate_per_day: float | None = Field(
        None,
        ge=0.0,
        description="Expected new outlinks per day since this fetch: the expected count at a "
        "later time t is rate_per_day x (t - fetched_at) in days, so pages fetched at "
        "different times compare fairly.",
    )
    next_fetch_at: datetime | None = Field(
        None,
        description="Suggested time of the next fetch: when the expected number of new "
        "outlinks reaches the deployment's target (default 1), capped to a maximum interval.",
    )
    reasons: list[str] = Field(
        default_factory=list,
        description="What drove the score, strongest first: own_history, related_pages, "
        "model, exploration; prior alone when nothing is known of the page yet.",
    )
    scorer: ScorerRef
    crawl: int | None = None
    status: int = 200
    kind: Literal["fetch", "related"] = Field(
        "fetch",
        description="fetch (absent): the update that follows a fetch of this page; related: "
        "the priority of this page's last fetch (fetched_at) revised because a sibling (a "
        "translation) showed new links: due at once, with the links expected to wait.",
    )
    related_to: RelatedTo | None = Field(
        None, description="With kind related: the sibling's fetch that announced it."
    )
    expected_waiting: float | None = Field(
        None,
        ge=0.0,
        description="With kind related: new outlinks expected to wait at the page because of "
        "the sibling's (the share that followed such announcements, learned from the stream).",
    )


def utc_now() -> datetime:
    """Timezone-aware now; the single clock of the package, injectable in callers."""
    return datetime.now(UTC)
