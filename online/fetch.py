"""The core's record of a fetch (`Fetch`), and the fast way to it from raw bytes.

A validated event (`online.events.FetchedPage`) carries what the crawler sent; the pipeline
works on a compact record instead: outlinks reduced to sorted fingerprints, the embedding to
a unit float32 vector, numbers rounded to the float32 page state is kept at, all cheap to
keep, compare and send between processes. `prepare` makes it from a validated event;
`parse_fetch` makes it from raw input, through the compiled fast path
(`online.fastparse.FastFetch`) when the event has plain types, else through
`online.events.parse_event`, which stays the one judge of acceptance and of errors.
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
import xxhash

from online.events import (
    DEFAULT_EMBEDDING_DIM,
    DEFAULT_LIMITS,
    DEFAULT_MAX_OUTLINKS,
    NUMBER_BOUNDS,
    EventError,
    EventLimits,
    FetchedPage,
    collect_links,
    parse_event,
    summarise_links,
)
from online.fastparse import FastFetch, unit_vector_bytes
from online.kernels import SlotRecord
from online.links import LinkInfo, canonical_summary, link_info


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


def prepare(event: FetchedPage) -> Fetch:
    """The compact `Fetch` of a validated event."""
    page = link_info(event.url)
    if event._link_summary is None:  # built directly, not through parse_event
        event._link_summary = summarise_links(page, event.outlink_infos)
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
    kept, dropped = collect_links(outlinks)
    by_fp, n_internal = summarise_links(page, kept.values())
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
