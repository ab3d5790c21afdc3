"""Per-page history: a pure update ``update(state | None, event) -> (state, emitted)``.

The same function runs in the embedded replay, under the Faust workers and in unit tests
(Bytewax's ``stateful_map`` shape). A page's state keeps what predicting its next new
outlinks needs and nothing more:

* 32-bit fingerprints of the last successful fetch's outlinks, so the next fetch yields its
  new internal and new external outlinks (a new link is missed only if its fingerprint
  collides with an old one: probability about n_old / 2**32);
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
from online.kernels import HistoryUpdate

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
        """Sorted uint32 fingerprints of the last successful fetch's outlinks."""
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


# -- compact serialisation ------------------------------------------------------------------

_FORMAT_VERSION = 1
_HEADER = struct.Struct("<BBddHIIIII" + "f" * (2 * len(SP_FIELDS) + len(SN_FIELDS)) + "BI")
_INTERVAL = struct.Struct("<IIBf")
_HAS_OK = 1


def to_bytes(state: PageState) -> bytes:
    """Serialise a state compactly (about 100 bytes + 13 per interval + 4 per outlink)."""
    n_fps = len(state.outlink_fps) // 4
    header = _HEADER.pack(
        _FORMAT_VERSION,
        _HAS_OK if state.last_ok_at is not None else 0,
        state.last_fetched_at,
        state.last_ok_at if state.last_ok_at is not None else 0.0,
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
    body = b"".join(
        _INTERVAL.pack(iv.new_internal, iv.new_external, iv.content_changed, iv.days)
        for iv in state.window
    )
    return header + body + state.outlink_fps


def from_bytes(data: bytes) -> PageState:
    """Inverse of `to_bytes`; raises ValueError on a foreign or truncated blob."""
    if not data or data[0] != _FORMAT_VERSION:
        raise ValueError("not a lookaround page state (unknown format version)")
    values = _HEADER.unpack_from(data, 0)
    (_, flags, last_fetched_at, last_ok_at, status, fetches, errors, intervals_total) = values[:8]
    content_fp, embedding_fp = values[8:10]
    n_sp, n_sn = len(SP_FIELDS), len(SN_FIELDS)
    floats = values[10 : 10 + 2 * n_sp + n_sn]
    n_window, n_fps = values[-2:]
    offset = _HEADER.size
    window = []
    for _ in range(n_window):
        new_internal, new_external, changed, days = _INTERVAL.unpack_from(data, offset)
        window.append(Interval(new_internal, new_external, bool(changed), days))
        offset += _INTERVAL.size
    fps = data[offset : offset + 4 * n_fps]
    if len(fps) != 4 * n_fps:
        raise ValueError("truncated page state")
    return PageState(
        last_fetched_at=last_fetched_at,
        last_ok_at=last_ok_at if flags & _HAS_OK else None,
        last_status=status,
        fetches=fetches,
        errors=errors,
        intervals_total=intervals_total,
        content_fp=content_fp,
        embedding_fp=embedding_fp,
        outlink_fps=fps,
        window=tuple(window),
        sp=tuple(floats[:n_sp]),
        sp_previous=tuple(floats[n_sp : 2 * n_sp]),
        sn=tuple(floats[2 * n_sp :]),
    )


def states_equal(a: PageState, b: PageState) -> bool:
    """Equality that treats NaN == NaN (missing values), for tests and parity checks."""
    return to_bytes(a) == to_bytes(b)
