"""Per-page history: a pure update ``update(state | None, event) -> (state, emitted)``.

The same function runs in the embedded replay, under the Faust workers and in unit tests
(Bytewax's ``stateful_map`` shape). A page's state keeps what predicting its next new
outlinks needs and nothing more:

* the top 24 bits of the 32-bit fingerprints of the last successful fetch's outlinks
  (`kept_fingerprints`), so the next fetch yields its new internal and new external outlinks
  (a new link is missed only if its kept bits match an old link's: probability about
  n_old / 2**24, 6 in a million for 100 outlinks; 3 bytes a link stored, not 4);
* a rolling window of the last H intervals between successful fetches (new internal, new
  external, content changed, days);
* the current and previous static-page (SP) values and the latest network values.

Idempotent: an event at the time of the last applied fetch is a duplicate and one older than
it is stale; neither changes anything. A page's first successful fetch creates no interval.
Floats are stored as float32 from the start so that ``from_bytes(to_bytes(s)) == s`` exactly:
a state kept in memory and one kept in Redis give the same scores.

>>> from online.events import parse_event
>>> day = 86400
>>> e1 = parse_event({"url": "https://a.org/", "fetched_at": 20454 * day,
...                   "outlinks": ["https://a.org/x"]})
>>> e2 = parse_event({"url": "https://a.org/", "fetched_at": 20455 * day,
...                   "outlinks": ["https://a.org/x", "https://a.org/y", "https://b.org/"]})
>>> state, out = update(None, e1)
>>> out.kind, out.interval
('applied', None)
>>> state, out = update(state, e2)
>>> out.interval.new_internal, out.interval.new_external, out.interval.days
(1, 1, 1.0)
>>> update(state, e2)[1].kind
'duplicate'
"""

from __future__ import annotations

import struct
from typing import Literal, NamedTuple

import numpy as np

from online.events import FetchedPage
from online.fetch import Fetch, prepare
from online.kernels import HistoryUpdate, StateCodec

DEFAULT_HISTORY = 8
NAN = float("nan")

#: Static-page values that change between fetches, in state order.
SP_FIELDS = ("content_size", "text_size", "text_quality", "internal_outlinks", "external_outlinks")
#: Static-network values reported by the crawler, in state order.
SN_FIELDS = ("inlinks_internal", "inlinks_external", "pagerank", "trustrank")


class Interval(NamedTuple):
    """What happened to a page between two successful fetches (a tuple: cheap to make and
    to turn into arrays)."""

    new_internal: int
    new_external: int
    content_changed: bool
    days: float

    @property
    def new_total(self) -> int:
        return self.new_internal + self.new_external


class PageState(NamedTuple):
    """Everything lookaround remembers about one page (a few hundred bytes serialised).

    A named tuple, not a dataclass: one is built per event, and a tuple builds 5x faster.
    """

    last_fetched_at: float
    last_ok_at: float | None = None
    last_status: int = 0
    fetches: int = 0
    errors: int = 0
    intervals_total: int = 0
    content_fp: int = 0
    embedding_fp: int = 0
    outlink_fps: bytes = b""
    window: tuple[Interval, ...] = ()
    sp: tuple[float, ...] = (NAN,) * len(SP_FIELDS)
    sp_previous: tuple[float, ...] = (NAN,) * len(SP_FIELDS)
    sn: tuple[float, ...] = (NAN,) * len(SN_FIELDS)

    @property
    def fingerprints(self) -> np.ndarray:
        """Sorted uint32 fingerprints of the last successful fetch's outlinks, as kept
        (`kept_fingerprints`: low byte 0)."""
        return np.frombuffer(self.outlink_fps, dtype="<u4")

    # -- derived values (look back) -------------------------------------------------------

    def lcr(self) -> tuple[float, float]:
        """Link change rate (internal, external): share of window intervals with >= 1 new link."""
        n = len(self.window)
        if not n:
            return NAN, NAN
        return (
            sum(1 for iv in self.window if iv.new_internal) / n,
            sum(1 for iv in self.window if iv.new_external) / n,
        )

    def nnl_previous(self) -> tuple[float, float]:
        """NNL-Pr: new (internal, external) outlinks in the last interval."""
        if not self.window:
            return NAN, NAN
        last = self.window[-1]
        return float(last.new_internal), float(last.new_external)

    def nnl_average(self) -> tuple[float, float]:
        """NNL-Av: mean new (internal, external) outlinks per interval over the window."""
        n = len(self.window)
        if not n:
            return NAN, NAN
        return (
            sum(iv.new_internal for iv in self.window) / n,
            sum(iv.new_external for iv in self.window) / n,
        )

    def ccr(self) -> float:
        """Content change rate: share of window intervals whose content digest changed."""
        if not self.window:
            return NAN
        return sum(1 for iv in self.window if iv.content_changed) / len(self.window)

    def rates_per_day(self) -> tuple[float, float]:
        """New (internal, external) outlinks per day over the window."""
        days = sum(iv.days for iv in self.window)
        if days <= 0:
            return NAN, NAN
        return (
            sum(iv.new_internal for iv in self.window) / days,
            sum(iv.new_external for iv in self.window) / days,
        )


Kind = Literal["applied", "duplicate", "stale"]


class Emitted(NamedTuple):
    """What one event did: applied (maybe closing an interval), or ignored as duplicate/stale."""

    kind: Kind
    interval: Interval | None = None
    first_fetch: bool = False


def update(
    state: PageState | None, event: Fetch | FetchedPage, *, history: int = DEFAULT_HISTORY
) -> tuple[PageState | None, Emitted]:
    """Apply one fetch to a page's state. Pure: the input state is never modified.

    * An event at the time of the page's last applied fetch is a duplicate, an older one is
      stale: the state comes back unchanged.
    * A failed (non-2xx) fetch counts as a fetch and an error and updates the network values;
      the outlink history is left as it was.
    * A successful fetch after an earlier successful one closes an interval: new internal and
      new external outlinks (fingerprints not in the previous set), whether the content digest
      changed, and its length in days (float32); the window keeps the last ``history``.

    Compiled (`online.kernels.HistoryUpdate`); ``tests/test_history.py`` holds the plain
    Python statement of these rules and checks the two agree on arbitrary fetch sequences.
    """
    fetch = event if isinstance(event, Fetch) else prepare(event)
    return _update(state, fetch, history)


_update = HistoryUpdate(
    PageState,
    Interval,
    Emitted,
    NAN,
    PageState._field_defaults["sp"],
    PageState._field_defaults["sn"],
)


def with_embedding(state: PageState, embedding_fp: int) -> PageState:
    """Record which embedding the index holds for the page (the fingerprint of what it came
    from); its related pages may have been found with an earlier one
    (`online.stores.Neighbours.found_with`)."""
    # Slices, not ``_replace``: this runs once per event and ``_replace`` is 4x slower.
    return _new_state(
        PageState, (*state[:_EMBEDDING_AT], embedding_fp, *state[_EMBEDDING_AT + 1 :])
    )


_EMBEDDING_AT = PageState._fields.index("embedding_fp")
_new_state = tuple.__new__


def kept_fingerprints(packed: bytes) -> bytes:
    """Outlink fingerprints (little-endian uint32, sorted) as a page state keeps them: the low
    byte of each cleared, so that three bytes a link are stored and the order is kept. The
    compiled update does the same (`online.kernels`).

    >>> kept_fingerprints(bytes([1, 2, 3, 4, 5, 6, 7, 8])).hex()
    '0002030400060708'
    """
    values = np.frombuffer(packed[: len(packed) // 4 * 4], dtype="<u4") & np.uint32(0xFFFFFF00)
    return values.astype("<u4").tobytes() + packed[len(values) * 4 :]


# -- compact serialisation ------------------------------------------------------------------

#: 3: varints for the counts (the fetch count alone for status 200, no errors and an interval
#: for every fetch after the first), small whole numbers and four-decimal values of the float
#: fields (a kind each: NaN, whole, four decimals, float32, or for a previous static-page value
#: the current one's: nothing stored), an interval's counts and content change in a byte where
#: the counts are small, interval days as whole seconds (2 to 64 of them packed: the first,
#: then Rice-coded differences, under 3 bytes each a week apart give or take two days), the
#: last fetch's time as uint32 seconds, the kept fingerprints' top 24 bits as Rice-coded gaps
#: (about 20 bits a link, not 24); compiled (`online.kernels.StateCodec`, whose docstring has
#: the layout). 2 (still read): three bytes a kept fingerprint, ``last_ok_at`` left out
#: where it is the last fetch's time, intervals in 8 bytes where their counts fit; 1 (still
#: read): 4-byte fingerprints (their low bytes cleared on reading), every interval in 13 bytes.
#: Every version keeps the last fetch's time at byte 2, as float64 or (3, flag 8) uint32: the
#: Redis write script compares it (`streams.redis_scripts`).
_FORMAT_VERSION = 3
_FLOATS = "f" * (2 * len(SP_FIELDS) + len(SN_FIELDS))
#: version 1: the whole header in one piece
_HEADER_V1 = struct.Struct("<BBddHIIIII" + _FLOATS + "BI")
_INTERVAL_V1 = struct.Struct("<IIBf")
#: version 2: version, flags, last_fetched_at; last_ok_at (only with _HAS_OK and not _OK_AT_LAST);
#: then the rest
_LEAD = struct.Struct("<BBd")
_TIME = struct.Struct("<d")
_REST = struct.Struct("<HIIIII" + _FLOATS + "BI")
#: an interval: new internal, new external (top bit: content changed), days
_INTERVAL = struct.Struct("<HHf")
_HAS_OK, _OK_AT_LAST, _WIDE_INTERVALS = 1, 2, 4
#: the most new external links an 8-byte interval holds (its top bit says content changed)
_NARROW_EXTERNAL = 0x7FFF

_codec = StateCodec(PageState, Interval, NAN)


def to_bytes(state: PageState) -> bytes:
    """Serialise a state compactly (format version 3: about 45 bytes + 2 to 4 per interval +
    2.5 per outlink): its fingerprints' top 24 bits, all a state from `update` keeps
    (`kept_fingerprints`). Reads back exactly what version 2 read back (floats as float32)."""
    return _codec.encode(state)


def _to_bytes_v2(state: PageState) -> bytes:
    """A state as format version 2 wrote it (about 90 bytes + 8 per interval + 3 per outlink),
    kept for the tests that check version 2 is still read."""
    kept = np.frombuffer(state.outlink_fps[: len(state.outlink_fps) // 4 * 4], dtype=np.uint8)
    n_fps = len(kept) // 4
    flags = 0
    lead = b""
    if state.last_ok_at is not None:
        flags |= _HAS_OK
        if state.last_ok_at == state.last_fetched_at:
            flags |= _OK_AT_LAST
        else:
            lead = _TIME.pack(state.last_ok_at)
    narrow = all(
        iv.new_internal <= 0xFFFF and iv.new_external <= _NARROW_EXTERNAL for iv in state.window
    )
    if not narrow:
        flags |= _WIDE_INTERVALS
    rest = _REST.pack(
        state.last_status,
        state.fetches,
        state.errors,
        state.intervals_total,
        state.content_fp,
        state.embedding_fp,
        *state.sp,
        *state.sp_previous,
        *state.sn,
        len(state.window),
        n_fps,
    )
    if narrow:
        body = b"".join(
            _INTERVAL.pack(
                iv.new_internal, iv.new_external | (0x8000 if iv.content_changed else 0), iv.days
            )
            for iv in state.window
        )
    else:
        body = b"".join(
            _INTERVAL_V1.pack(iv.new_internal, iv.new_external, iv.content_changed, iv.days)
            for iv in state.window
        )
    head = _LEAD.pack(2, flags, state.last_fetched_at)
    return head + lead + rest + body + kept.reshape(n_fps, 4)[:, 1:].tobytes()


def from_bytes(data: bytes) -> PageState:
    """Inverse of `to_bytes` (and reads versions 1 and 2); raises ValueError on a foreign or
    truncated blob."""
    if not data or data[0] not in (1, 2, _FORMAT_VERSION):
        raise ValueError("not a lookaround page state (unknown format version)")
    if data[0] == _FORMAT_VERSION:
        return _codec.decode(bytes(data))
    try:
        return _from_v1(data) if data[0] == 1 else _from_v2(data)
    except struct.error as exc:
        raise ValueError(f"truncated page state ({exc})") from None


def _from_v2(data: bytes) -> PageState:
    _, flags, last_fetched_at = _LEAD.unpack_from(data, 0)
    offset = _LEAD.size
    last_ok_at = None
    if flags & _HAS_OK:
        if flags & _OK_AT_LAST:
            last_ok_at = last_fetched_at
        else:
            (last_ok_at,) = _TIME.unpack_from(data, offset)
            offset += _TIME.size
    values = _REST.unpack_from(data, offset)
    offset += _REST.size
    window = []
    n_window = values[-2]
    if flags & _WIDE_INTERVALS:
        window, offset = _wide_intervals(data, offset, n_window)
    else:
        for new_internal, external, days in _INTERVAL.iter_unpack(
            data[offset : offset + _INTERVAL.size * n_window]
        ):
            window.append(Interval(new_internal, external & 0x7FFF, bool(external & 0x8000), days))
        offset += _INTERVAL.size * n_window
    if len(window) != n_window:
        raise ValueError("truncated page state")
    return _state(last_fetched_at, last_ok_at, values[:-2], window, data, offset, values[-1], 3)


def _from_v1(data: bytes) -> PageState:
    values = _HEADER_V1.unpack_from(data, 0)
    _, flags, last_fetched_at, last_ok_at = values[:4]
    window, offset = _wide_intervals(data, _HEADER_V1.size, values[-2])
    last_ok = last_ok_at if flags & _HAS_OK else None
    return _state(last_fetched_at, last_ok, values[4:-2], window, data, offset, values[-1], 4)


def _wide_intervals(data: bytes, offset: int, count: int) -> tuple[list[Interval], int]:
    """``count`` 13-byte intervals from ``offset``, and the offset after them."""
    window = []
    for _ in range(count):
        new_internal, new_external, changed, days = _INTERVAL_V1.unpack_from(data, offset)
        window.append(Interval(new_internal, new_external, bool(changed), days))
        offset += _INTERVAL_V1.size
    return window, offset


def _state(
    last_fetched_at: float,
    last_ok_at: float | None,
    values: tuple,
    window: list[Interval],
    data: bytes,
    offset: int,
    n_fps: int,
    width: int,
) -> PageState:
    """A read state from its parts: ``values`` from the status to the network values, the
    fingerprints ``width`` bytes each from ``offset`` (their top 24 bits kept)."""
    status, fetches, errors, intervals_total, content_fp, embedding_fp = values[:6]
    n_sp, n_sn = len(SP_FIELDS), len(SN_FIELDS)
    floats = values[6 : 6 + 2 * n_sp + n_sn]
    stored = data[offset : offset + width * n_fps]
    if len(stored) != width * n_fps:
        raise ValueError("truncated page state")
    kept = np.zeros((n_fps, 4), dtype=np.uint8)
    kept[:, 1:] = np.frombuffer(stored, dtype=np.uint8).reshape(n_fps, width)[:, width - 3 :]
    return PageState(
        last_fetched_at=last_fetched_at,
        last_ok_at=last_ok_at,
        last_status=status,
        fetches=fetches,
        errors=errors,
        intervals_total=intervals_total,
        content_fp=content_fp,
        embedding_fp=embedding_fp,
        outlink_fps=kept.tobytes(),
        window=tuple(window),
        sp=tuple(floats[:n_sp]),
        sp_previous=tuple(floats[n_sp : 2 * n_sp]),
        sn=tuple(floats[2 * n_sp :]),
    )


def states_equal(a: PageState, b: PageState) -> bool:
    """Equality that treats NaN == NaN (missing values), for tests and parity checks."""
    return to_bytes(a) == to_bytes(b) and a.outlink_fps == b.outlink_fps
