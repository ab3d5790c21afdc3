"""What the pipeline keeps per page, behind one small store interface.

Three records per page: its history state (keyed by URL), its stats row (what it lends its
neighbours, keyed by page id) and its related-page list (keyed by page id). The embedded replay
keeps them in memory (`MemoryPageStore`); the live workers keep them in Redis. Both go through
`PageStore`, so the pipeline cannot tell them apart.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from itertools import accumulate, chain
from typing import Protocol

import numpy as np
import xxhash

from online.features import LOOKAROUND_WIDE, N_STATS
from online.history import PageState
from online.history import from_bytes as state_from_bytes
from online.history import to_bytes as state_to_bytes
from online.id_rows import IdRows
from online.kernels import (
    SlotRecord,
    decode_neighbours,
    encode_neighbours,
    merge_page_records,
    record_sections,
)
from online.kernels import direction_codes as _direction_codes_kernel
from online.links import sibling_key_id, url_id
from online.related_updates import GroupGain, SiblingFollow, SiblingGroup
from online.schedule import Allocation

#: `Neighbours` with ``short_ids`` keep each id's bits above these (page ids have 63 bits: 40
#: are kept, 5 bytes). Among n indexed pages another shares a given page's 40 bits with
#: probability n / 2**40 (1e-6 at a million pages, 1e-3 at a billion); such a list is
#: searched again rather than read with the wrong page. `online.kernels.encode_neighbours`
#: and `decode_neighbours` hold the same shift and width.
ID_PREFIX_SHIFT = 23


@dataclass(frozen=True, slots=True)
class Neighbours:
    """A page's related pages: ids, weights summing to 1, the index size when found and the
    direction of the vector they were found with (`direction_codes`; None: unknown), with
    that vector's cosine to its codes (``found_cos``, see `online.neighbour_search`).

    Stored as bytes, versioned. Version 4 keeps the weights a byte each when they lie on the
    byte grid (the compact store's pipeline rounds them so: `to_byte_grid`), the codes of a
    list largest first as their Rice-coded drops (about 4 bits each,
    `online.kernels.pack_descending`), else in half precision when they are half-precision
    values, and the direction in 4 bits a dimension when its codes fit; its index size and
    counts are varints and a ``found_cos`` in [0.5, 2) (all but 1.0's last byte) in 3 bytes.
    Versions 3 (the same with fixed-size counts, a byte a weight code and 4 bytes of
    ``found_cos``), 2 (int8 codes, read with ``found_cos`` 1) and 1 (no direction) are still
    read. Every version reads back exactly what was written, but
    for ``short_ids`` (the compact store's): each id is then kept as its top 40 bits
    (`ID_PREFIX_SHIFT`; 5 bytes, not 8) and read back with its low bits 0, and the pipeline
    finds the pages again in the index (`online.neighbour_search.resolve_short_ids`).
    """

    ids: np.ndarray
    weights: np.ndarray
    index_size: int
    found_with: np.ndarray | None = None
    found_cos: float = 1.0
    short_ids: bool = False

    #: versions 1 and 2 (version 2 with the direction's dimension after); versions 3 and 4
    #: are `online.kernels.encode_neighbours` / `decode_neighbours`'
    _HEAD = struct.Struct("<BIH")
    _DIM = struct.Struct("<H")

    def to_bytes(self) -> bytes:
        """Version 4, encoded in one compiled pass (`online.kernels.encode_neighbours`);
        version 1 for a list without a direction, as before."""
        if self.found_with is None:
            ids = self.ids.astype("<i8").tobytes()
            weights = np.asarray(self.weights, dtype="<f4").tobytes()
            return self._HEAD.pack(1, self.index_size, len(self.ids)) + ids + weights
        return encode_neighbours(
            np.ascontiguousarray(self.ids, dtype=np.int64),
            np.ascontiguousarray(self.weights, dtype=np.float32),
            self.index_size,
            np.ascontiguousarray(self.found_with, dtype=np.int8),
            self.found_cos,
            self.short_ids,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Neighbours:
        """Any version; raises ValueError on a foreign or truncated blob."""
        if not data or data[0] not in (1, 2, 3, 4):
            raise ValueError("unknown neighbours format")
        try:
            if data[0] >= 3:
                return cls._from_v3(data)
            version, index_size, n = cls._HEAD.unpack_from(data, 0)
            offset = cls._HEAD.size
            dim = 0
            if version == 2:
                (dim,) = cls._DIM.unpack_from(data, offset)
                offset += cls._DIM.size
            ids = np.frombuffer(data, dtype="<i8", count=n, offset=offset)
            weights = np.frombuffer(data, dtype="<f4", count=n, offset=offset + 8 * n)
            found_with = None
            if version == 2:
                found_with = np.frombuffer(data, dtype=np.int8, count=dim, offset=offset + 12 * n)
                found_with = found_with.copy()
        except (struct.error, ValueError, IndexError) as exc:
            raise ValueError(f"truncated neighbours record ({exc})") from None
        return cls(ids.astype(np.int64), weights.astype(np.float32), index_size, found_with)

    @classmethod
    def _from_v3(cls, data: bytes) -> Neighbours:
        """Versions 3 and 4, decoded in one compiled pass (`online.kernels.decode_neighbours`):
        a page's list is read for every event of the page."""
        return new_neighbours(*decode_neighbours(data))


#: `Neighbours` from all six values in field order, without the frozen dataclass's per-field
#: calls (``__init__``'s cost was half that of reading a list back): for the lists made or
#: read once an event
new_neighbours = SlotRecord(Neighbours, tuple(f.name for f in fields(Neighbours)))

#: The found-with direction's codes run from -DIRECTION_LEVELS to +DIRECTION_LEVELS: 4 bits a
#: dimension (`Neighbours` packs two a byte).
DIRECTION_LEVELS = 7


def direction_codes(vector: np.ndarray, levels: int = DIRECTION_LEVELS) -> np.ndarray:
    """A vector's direction as int8 codes proportional to it, the largest component at
    +-``levels`` (7 by default: 4 bits a dimension; 127: a byte). What a page's related pages
    were found with is kept this way (`Neighbours.found_with`); a cosine similarity needs no
    more than the direction, and the codes' own error is allowed for with their cosine to
    the vector (`codes_cosine`)."""
    v = np.asarray(vector).reshape(-1)
    if v.dtype != np.float32:
        v = v.astype(np.float64)
    return _direction_codes_kernel(np.ascontiguousarray(v), levels)


#: Dimensions the compact store keeps a found-with direction in: a longer vector is kept as
#: its random projection to these (`compact_direction`), 4 bits each (32 bytes, where 192
#: dimensions took 96). A cosine near 1 survives the projection within about
#: sqrt(2 / 64) = 18% of its distance from 1, enough to decide whether a page moved.
DIRECTION_DIMS = 64


@functools.lru_cache(maxsize=8)
def direction_projection(dim: int) -> np.ndarray:
    """The fixed (`DIRECTION_DIMS`, ``dim``) matrix of random signs / sqrt(`DIRECTION_DIMS`)
    that `compact_direction` projects with: drawn from XXH3 of its size, not from a numpy
    generator, so it is the same on every machine and every library version. Read-only."""
    count = DIRECTION_DIMS * dim
    seeds = range((count + 127) // 128)
    digests = b"".join(xxhash.xxh3_128_digest(f"lookaround-direction:{dim}:{i}") for i in seeds)
    bits = np.unpackbits(np.frombuffer(digests, np.uint8))[:count].astype(np.float64)
    matrix = (2.0 * bits - 1.0).reshape(DIRECTION_DIMS, dim) / np.sqrt(DIRECTION_DIMS)
    matrix.flags.writeable = False
    return matrix


def compact_direction(vector: np.ndarray) -> np.ndarray:
    """What the compact store keeps the direction of: a vector's random projection to
    `DIRECTION_DIMS` dimensions when it has more (`direction_projection`), else the vector.

    >>> compact_direction(np.ones(192)).shape, compact_direction(np.ones(16)).shape
    ((64,), (16,))
    """
    v = np.asarray(vector, dtype=np.float64).reshape(-1)
    return direction_projection(v.size) @ v if v.size > DIRECTION_DIMS else v


def codes_cosine(vector: np.ndarray, codes: np.ndarray) -> float:
    """The cosine of ``vector`` with its direction codes, as a float32 value (what is stored):
    1 for a zero vector or zero codes (nothing to correct)."""
    v = np.asarray(vector, dtype=np.float64).reshape(-1)
    c = np.asarray(codes, dtype=np.float64).reshape(-1)
    norms = float(np.sqrt((v @ v) * (c @ c)))
    if not norms > 0.0:
        return 1.0
    return float(np.float32(min(float(v @ c) / norms, 1.0)))


#: Half precision's largest finite value: a larger magnitude is kept as it (`to_half`).
HALF_MAX = 65504.0


def to_half(values: np.ndarray, wide: np.ndarray | None = None) -> np.ndarray:
    """``values`` as float32 holding half-precision values (magnitudes clamped to 65,504), but
    for the ``wide`` columns (a boolean mask over the last axis), kept as they are. What the
    pipeline stores of stats, related-page weights and feature rows is rounded so where it is
    made, whichever store keeps it: the memory store and Redis hold the same numbers, and
    Redis keeps them in two bytes (`pack_floats`)."""
    x = np.asarray(values, dtype=np.float32)
    half = np.clip(x, -HALF_MAX, HALF_MAX).astype(np.float16).astype(np.float32)
    if wide is None or not wide.any():
        return half
    return np.where(wide, x, half).astype(np.float32)


#: Steps of the related-page weights' byte grid (`to_byte_grid`).
WEIGHT_STEPS = 255


def byte_grid_codes(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative weights (the last axis a page's related pages) as byte codes: each weight
    as a share of its row's largest (``top``, float32), in `WEIGHT_STEPS` steps."""
    w = np.asarray(weights, dtype=np.float32)
    top = w.max(axis=-1, keepdims=True, initial=0.0)
    ratio = np.divide(w, top, out=np.zeros(w.shape, np.float64), where=top > 0)
    codes = np.rint(np.clip(ratio, 0.0, 1.0) * WEIGHT_STEPS).astype(np.uint8)
    return codes, top


def byte_grid_values(codes: np.ndarray, top: np.ndarray) -> np.ndarray:
    """`byte_grid_codes`' weights: ``top`` x code / `WEIGHT_STEPS`, in float32 (so the largest
    comes back exactly as ``top``, and coding the result again gives the same codes)."""
    share = np.asarray(codes, dtype=np.float32) / np.float32(WEIGHT_STEPS)
    return (np.asarray(top, dtype=np.float32) * share).astype(np.float32)


def to_byte_grid(weights: np.ndarray) -> np.ndarray:
    """Related-page weights rounded to a byte each, as the compact store keeps them: a share of
    the row's largest weight in 255 steps (within 0.2% of the largest; a weight under 1/510
    of it becomes 0, the page then left out). The pipeline rounds them so where it finds
    them, so every store holds the same numbers (`Neighbours` keeps the codes and the top).

    >>> to_byte_grid(np.array([0.5, 0.301, 0.2])).astype(float).round(4).tolist()
    [0.5, 0.302, 0.2]
    """
    return byte_grid_values(*byte_grid_codes(weights))


#: `pack_floats` layouts: every value float32, or the narrow columns in half precision.
_FULL, _COMPACT = 0, 1


def pack_floats(values: np.ndarray, wide: np.ndarray) -> bytes:
    """A float32 row as stored: a layout byte, then, when its narrow columns (not ``wide``)
    hold half-precision values (`to_half`), those as float16 followed by the wide ones as
    float32 (each in column order); else every value as float32. Lossless either way."""
    return pack_float_rows(np.asarray(values, dtype=np.float32).reshape(1, -1), wide)[0]


def pack_float_rows(rows: np.ndarray, wide: np.ndarray) -> list[bytes]:
    """`pack_floats` of each row of a (m, n) matrix, the rows encoded together."""
    m = np.ascontiguousarray(rows, dtype="<f4")
    out: list[bytes] = [b""] * len(m)
    compact = np.zeros(len(m), dtype=bool)
    if m.shape[1] == len(wide):
        narrow = m[:, ~wide]
        half = narrow.astype("<f2")
        back = half.astype("<f4")
        compact = ((back == narrow) | (np.isnan(back) & np.isnan(narrow))).all(axis=1)
        if compact.any():
            parts = [
                np.full((int(compact.sum()), 1), _COMPACT, dtype=np.uint8),
                half[compact].view(np.uint8),
                np.ascontiguousarray(m[compact][:, wide]).view(np.uint8),
            ]
            packed = np.hstack(parts)
            for at, row in zip(np.flatnonzero(compact).tolist(), packed, strict=True):
                out[at] = row.tobytes()
    full = np.flatnonzero(~compact)
    if len(full):
        packed = np.hstack([np.full((len(full), 1), _FULL, np.uint8), m[full].view(np.uint8)])
        for at, row in zip(full.tolist(), packed, strict=True):
            out[at] = row.tobytes()
    return out


def unpack_floats(data: bytes, wide: np.ndarray) -> np.ndarray:
    """`pack_floats`' inverse (float32); raises ValueError on a damaged blob."""
    n = len(wide) if data[:1] == bytes([_COMPACT]) else max(len(data) - 1, 0) // 4
    return unpack_float_rows([data], wide, n)[0]


def unpack_float_rows(blobs: Sequence[bytes], wide: np.ndarray, n: int) -> np.ndarray:
    """Many `pack_floats` rows of ``n`` values at once, as one (len(blobs), n) float32
    matrix, the rows of each layout decoded together. Raises ValueError naming the first
    damaged row (a wrong size, an unknown layout)."""
    out = np.empty((len(blobs), n), dtype=np.float32)
    n_wide = int(wide.sum()) if len(wide) == n else -1
    sizes = {_FULL: 1 + 4 * n, _COMPACT: 1 + 2 * (n - n_wide) + 4 * n_wide}
    layouts = np.array([b[0] if b else 255 for b in blobs], dtype=np.int16)
    lengths = np.array([len(b) for b in blobs], dtype=np.int64)
    for layout, size in sizes.items():
        if layout == _COMPACT and n_wide < 0:
            continue
        bad = np.flatnonzero((layouts == layout) & (lengths != size))
        if len(bad):
            at = int(bad[0])
            raise ValueError(f"row {at} has {lengths[at]} bytes, expected {size}")
    known = (layouts == _FULL) | ((layouts == _COMPACT) & (n_wide >= 0))
    if not known.all():
        raise ValueError(f"row {int(np.flatnonzero(~known)[0])} has an unknown layout")
    for layout in (_FULL, _COMPACT):
        at = np.flatnonzero(layouts == layout)
        if not len(at):
            continue
        raw = np.frombuffer(b"".join(blobs[i] for i in at), dtype=np.uint8)
        raw = raw.reshape(len(at), sizes[layout])[:, 1:]
        if layout == _FULL:
            out[at] = np.ascontiguousarray(raw).view("<f4")
        else:
            cut = 2 * (n - n_wide)
            out[np.ix_(at, np.flatnonzero(~wide))] = np.ascontiguousarray(raw[:, :cut]).view("<f2")
            out[np.ix_(at, np.flatnonzero(wide))] = np.ascontiguousarray(raw[:, cut:]).view("<f4")
    return out


def row_to_bytes(row: np.ndarray) -> bytes:
    """A float32 row (a page's stats or its feature row) as little-endian bytes."""
    return row.astype("<f4").tobytes()


#: Stats rows are stored as any other float32 row.
stats_to_bytes = row_to_bytes


def stats_from_bytes(data: bytes) -> np.ndarray:
    row = np.frombuffer(data, dtype="<f4")
    if row.shape != (N_STATS,):
        raise ValueError(f"stats row of {row.size} values, expected {N_STATS}")
    return row.astype(np.float32)


def row_from_bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


@dataclass
class PageWrites:
    """Everything one batch changed, written in one go (one Redis transaction).

    ``rows`` are the feature rows of each page's latest fetch, kept until the page's next fetch
    brings their label (the online learners learn from them then). ``learner`` is the online
    learner after the batch, or None when it did not change; a store that persists it must do
    so in the same transaction as the page records, so that after a crash the learner has seen
    exactly the events whose page states were written.
    """

    states: dict[str, PageState]
    stats: dict[int, np.ndarray]
    neighbours: dict[int, Neighbours]
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    learner: object | None = None
    #: URLs of pages seen for the first time, by sibling key (`online.links.sibling_key`),
    #: in order
    siblings: dict[str, list[str]] = field(default_factory=dict)
    #: each sibling group's latest gain where the batch changed it (`online.related_updates`)
    gains: dict[str, GroupGain] = field(default_factory=dict)
    #: what siblings following a gain showed, after the batch; None when unchanged
    follow: SiblingFollow | None = None
    #: the budget schedule's state after the batch (`online.schedule`), None when unchanged
    allocation: Allocation | None = None
    #: the page id of URLs of ``states``, where the batch knows it (the fetch brought it): a
    #: store keyed by page id need not derive it from the URL again (`state_page_ids`)
    page_ids: dict[str, int] = field(default_factory=dict)


def state_page_ids(writes: PageWrites) -> list[int]:
    """The page id of each URL of ``writes.states``, in its order: as the batch gave it, else
    derived from the URL."""
    known = writes.page_ids
    return [pid if (pid := known.get(url)) is not None else url_id(url) for url in writes.states]


def page_ids_of(urls: Sequence[str], page_ids: Sequence[int] | None) -> Sequence[int]:
    """``page_ids`` when the caller gave them (one per URL), else derived from the URLs."""
    if page_ids is None:
        return list(map(url_id, urls))
    if len(page_ids) != len(urls):
        raise ValueError(f"{len(page_ids)} page ids given for {len(urls)} URLs")
    return page_ids


def merge_records(target: PageWrites | MemoryPageStore, writes: PageWrites) -> None:
    """Lay ``writes`` over ``target``'s per-page records (states, neighbours, rows, siblings,
    group gains) and its learner, sibling-follow state and allocation where the batch changed
    them; stats rows are each holder's own to keep."""
    target.states.update(writes.states)
    if isinstance(target, PageWrites):  # a store keyed by URL has no use for them
        target.page_ids.update(writes.page_ids)
    target.neighbours.update(writes.neighbours)
    target.rows.update(writes.rows)
    for key, urls in writes.siblings.items():
        target.siblings.setdefault(key, []).extend(urls)
    target.gains.update(writes.gains)
    if writes.learner is not None:
        target.learner = writes.learner
    if writes.follow is not None:
        target.follow = writes.follow
    if writes.allocation is not None:
        target.allocation = writes.allocation


def sibling_group(urls: Sequence[str], gain: GroupGain | None) -> SiblingGroup:
    """A group from its members' URLs (their page ids derived) and its latest gain."""
    return sibling_groups([urls], [gain])[0]


def sibling_groups(
    members: Sequence[Sequence[str]],
    gains: Sequence[GroupGain | None],
    page_ids: np.ndarray | None = None,
) -> list[SiblingGroup]:
    """`sibling_group` of many groups: their page ids derived in one pass, each group's a
    view of them (a batch asks for a group per applied page, most of them of one page).
    ``page_ids``: every member's page id, the groups' one after another, where the caller
    keeps them (none derived then)."""
    sizes = [len(urls) for urls in members]
    if page_ids is None:
        ids = np.fromiter(map(url_id, chain.from_iterable(members)), np.int64, sum(sizes))
    elif len(page_ids) != sum(sizes):
        raise ValueError(f"{len(page_ids)} page ids given for {sum(sizes)} group members")
    else:
        ids = np.asarray(page_ids, dtype=np.int64)
    ends = list(accumulate(sizes))
    return [
        _new_group((tuple(urls), ids[end - size : end], gain))
        for urls, size, end, gain in zip(members, sizes, ends, gains, strict=True)
    ]


#: a `SiblingGroup` from its three values, without the named tuple's Python ``__new__``
_new_group = functools.partial(tuple.__new__, SiblingGroup)


class PageStore(Protocol):
    def get_states(
        self, urls: Sequence[str], page_ids: Sequence[int] | None = None
    ) -> list[PageState | None]:
        """The pages' history states (None: never applied). ``page_ids``: their page ids, one
        per URL, where the caller has them (a store keyed by id then derives none)."""
        ...

    def get_neighbours(self, page_ids: Sequence[int]) -> list[Neighbours | None]: ...

    def get_stats(self, page_ids: np.ndarray) -> np.ndarray:
        """(n, N_STATS) float32 rows in ``page_ids`` order, NaN rows for unknown pages."""
        ...

    def get_rows(self, page_ids: Sequence[int]) -> list[np.ndarray | None]:
        """Feature rows (float32) of each page's latest fetch, None where none is kept."""
        ...

    def get_learner(self) -> object | None:
        """The online learner as last written, or None."""
        ...

    def get_siblings(self, keys: Sequence[str]) -> list[SiblingGroup]:
        """Per sibling key, the pages that share it (in the order they were first seen) and
        the group's latest gain."""
        ...

    def get_follow(self) -> SiblingFollow | None:
        """What siblings following a gain showed, as last written, or None."""
        ...

    def get_allocation(self) -> Allocation | None:
        """The budget schedule's state as last written, or None (read only with a budget)."""
        ...

    def write(self, writes: PageWrites) -> None: ...


class MemoryPageStore:
    """The embedded default: dicts and one growing stats matrix in this process."""

    def __init__(self) -> None:
        self.states: dict[str, PageState] = {}
        self.neighbours: dict[int, Neighbours] = {}
        self.rows: dict[int, np.ndarray] = {}
        self.learner: object | None = None
        self.siblings: dict[str, list[str]] = {}
        self.gains: dict[str, GroupGain] = {}
        self.follow: SiblingFollow | None = None
        self.allocation: Allocation | None = None
        self._stats = np.full((1024, N_STATS), np.nan, dtype=np.float32)
        # page id -> stats row: a batch's ~20k neighbour lookups are one binary search
        # instead of 20k dict lookups, and no dict entry a page
        self._stats_rows = IdRows()

    def get_states(
        self, urls: Sequence[str], page_ids: Sequence[int] | None = None
    ) -> list[PageState | None]:
        return [self.states.get(url) for url in urls]

    def get_neighbours(self, page_ids: Sequence[int]) -> list[Neighbours | None]:
        return [self.neighbours.get(pid) for pid in page_ids]

    def get_stats(self, page_ids: np.ndarray) -> np.ndarray:
        rows, found = self._stats_rows.find(np.asarray(page_ids, dtype=np.int64))
        out = self._stats[rows]
        out[~found] = np.nan
        return out

    def get_rows(self, page_ids: Sequence[int]) -> list[np.ndarray | None]:
        return [self.rows.get(pid) for pid in page_ids]

    def get_learner(self) -> object | None:
        return self.learner

    def get_siblings(self, keys: Sequence[str]) -> list[SiblingGroup]:
        members = [self.siblings.get(key, ()) for key in keys]
        return sibling_groups(members, [self.gains.get(key) for key in keys])

    def get_follow(self) -> SiblingFollow | None:
        return self.follow

    def get_allocation(self) -> Allocation | None:
        return self.allocation

    def stats_ids(self) -> np.ndarray:
        """The ids of the pages with a stats row, ascending."""
        return self._stats_rows.ids()

    def stats(self, page_id: int) -> np.ndarray | None:
        rows, found = self._stats_rows.find(np.array([page_id], dtype=np.int64))
        return self._stats[rows[0]].copy() if found[0] else None

    def write(self, writes: PageWrites) -> None:
        merge_records(self, writes)
        if not writes.stats:
            return
        ids = np.fromiter(writes.stats, dtype=np.int64, count=len(writes.stats))
        # a stats row a page, never freed: new pages take the next rows, in batch order
        rows = self._stats_rows.number(ids, start=len(self._stats_rows))
        used = len(self._stats_rows)
        if used > len(self._stats):  # by a quarter: the slack is memory at the peak
            size = max(len(self._stats) + len(self._stats) // 4, used)
            grown = np.full((size, N_STATS), np.nan, dtype=np.float32)
            grown[: len(self._stats)] = self._stats
            self._stats = grown
        self._stats[rows] = np.stack(list(writes.stats.values()))  # one assignment

    def __len__(self) -> int:
        return len(self.states)


_NO_WIDE = np.zeros(0, dtype=bool)


def row_records(rows: dict[int, np.ndarray]) -> dict[int, bytes]:
    """Feature rows as a page record keeps them (`pack_floats`): a look-around row in half
    precision where the pipeline rounded it so (`to_half`), any other row whole, in float32;
    the look-around rows encoded together."""
    width = len(LOOKAROUND_WIDE)
    out: dict[int, bytes] = {}
    lookaround = [pid for pid, row in rows.items() if len(row) == width]
    if lookaround:
        stacked = np.stack([rows[pid] for pid in lookaround])
        out.update(zip(lookaround, pack_float_rows(stacked, LOOKAROUND_WIDE), strict=True))
    for pid, row in rows.items():
        if len(row) != width:
            out[pid] = pack_floats(row, _NO_WIDE)
    return out


def row_from_record(blob: bytes) -> np.ndarray:
    """One row of `row_records` back (float32); raises ValueError on a damaged blob."""
    return unpack_floats(blob, LOOKAROUND_WIDE if blob[:1] == bytes([_COMPACT]) else _NO_WIDE)


def rows_from_records(blobs: Sequence[bytes | None]) -> list[np.ndarray | None]:
    """Many rows of `row_records` back (float32, None where None), the look-around rows
    decoded together: a batch reads thousands, and one row's decoding costs a dozen numpy
    calls. Raises ValueError on a damaged blob."""
    out: list[np.ndarray | None] = [None] * len(blobs)
    present = [(i, blob) for i, blob in enumerate(blobs) if blob is not None]
    try:
        width = len(LOOKAROUND_WIDE)
        rows = unpack_float_rows([blob for _, blob in present], LOOKAROUND_WIDE, width)
        for (i, _), row in zip(present, rows, strict=True):
            out[i] = row
    except ValueError:  # rows of another width, or a damaged one: one at a time
        for i, blob in present:
            out[i] = row_from_record(blob)
    return out


#: A `CompactMemoryPageStore` record: a head of three little-endian uint32 lengths of its
#: sections (history state, related pages, feature row), 0 for one it does not hold, then the
#: sections (`online.kernels.record_sections` reads one, `merge_page_records` replaces some).
_STATE, _RELATED, _ROW = 0, 1, 2


class CompactMemoryPageStore(MemoryPageStore):
    """The embedded default at scale: one bytes record a page, keyed by its page id as in
    Redis, holding what a Redis page record holds (`online.history.to_bytes`,
    `Neighbours.to_bytes`, `row_records`), decoded when read.

    A decoded history state, related-page list and feature row take ~2.8 kB of Python objects
    a page, and a replay of a million pages keeps them all; three dicts of bytes (one keyed
    by URL) still took ~0.5 kB a page in keys, entries and object heads on top of the bytes.
    Sibling groups are kept by their key's id (`sibling_key_id`); a group of one page, its
    home page (``https://`` + its key: most groups), as that id and the page's id in sorted
    arrays, 16 B where a dict entry keyed by the key took about 170.
    Every encoding reads back exactly what was written, so the scores are those of
    `MemoryPageStore` (and of the Redis store).
    """

    def __init__(self) -> None:
        super().__init__()
        self._records: dict[int, bytes] = {}
        self._groups: dict[int, str | list[str]] = {}  # by key id: all but the home-alone
        self._alone = IdRows()  # the key ids of the groups that are their home page alone
        self._pages = 0  # records holding a history state

    def _section_of(self, page_ids: Iterable[int], which: int) -> list[bytes | None]:
        """Section ``which`` of each page's record (None: no record, or none held)."""
        get = self._records.get
        return record_sections([get(pid) for pid in page_ids], which)

    def get_states(
        self, urls: Sequence[str], page_ids: Sequence[int] | None = None
    ) -> list[PageState | None]:
        blobs = self._section_of(page_ids_of(urls, page_ids), _STATE)
        return [None if b is None else state_from_bytes(b) for b in blobs]

    def get_neighbours(self, page_ids: Sequence[int]) -> list[Neighbours | None]:
        blobs = self._section_of(page_ids, _RELATED)
        return [None if b is None else Neighbours.from_bytes(b) for b in blobs]

    def get_rows(self, page_ids: Sequence[int]) -> list[np.ndarray | None]:
        return rows_from_records(self._section_of(page_ids, _ROW))

    def get_siblings(self, keys: Sequence[str]) -> list[SiblingGroup]:
        ids = np.fromiter(map(sibling_key_id, keys), np.int64, len(keys))
        home_ids, alone = self._alone.find(ids)
        members: list[Sequence[str]] = []
        page_ids: list[int] = []
        for key, kid, home, home_id in zip(
            keys, ids.tolist(), alone.tolist(), home_ids.tolist(), strict=True
        ):
            group = self._members(key, kid, home)
            members.append(group)
            if home:  # its home page, whose id it keeps
                page_ids.append(home_id)
            else:
                page_ids.extend(map(url_id, group))
        gains = [self.gains.get(key) for key in keys]
        return sibling_groups(members, gains, np.array(page_ids, dtype=np.int64))

    def _members(self, key: str, key_id: int, alone: bool) -> Sequence[str]:
        if alone:
            return (f"https://{key}",)
        group = self._groups.get(key_id, ())
        return (group,) if isinstance(group, str) else group

    def write(self, writes: PageWrites) -> None:
        super().write(replace(writes, states={}, neighbours={}, rows={}, siblings={}))
        changed: dict[int, list[bytes | None]] = {}
        for pid, state in zip(state_page_ids(writes), writes.states.values(), strict=True):
            changed.setdefault(pid, [None, None, None])[_STATE] = state_to_bytes(state)
        for pid, neighbours in writes.neighbours.items():
            changed.setdefault(pid, [None, None, None])[_RELATED] = neighbours.to_bytes()
        for pid, blob in row_records(writes.rows).items():
            changed.setdefault(pid, [None, None, None])[_ROW] = blob
        self._pages += merge_page_records(self._records, changed)
        if writes.siblings:
            self._add_members(writes.siblings, writes.page_ids)

    def _add_members(self, siblings: dict[str, list[str]], page_ids: dict[str, int]) -> None:
        """Pages join their sibling groups; the home-alone array changes once a batch. A
        group of its home page alone keeps that page's id (from ``page_ids`` where the batch
        knows it) as its row, so that reading it derives none."""
        keys = list(siblings)
        ids = np.fromiter(map(sibling_key_id, keys), np.int64, len(keys))
        alone = self._alone.contains(ids)
        joined, joined_ids, left = [], [], []
        for key, kid, was_alone in zip(keys, ids.tolist(), alone.tolist(), strict=True):
            urls = siblings[key]
            group = self._groups.get(kid)
            if group is None and not was_alone and len(urls) == 1:
                if urls[0] == f"https://{key}":
                    joined.append(kid)
                    home_id = page_ids.get(urls[0])
                    joined_ids.append(url_id(urls[0]) if home_id is None else home_id)
                else:
                    self._groups[kid] = urls[0]
                continue
            if was_alone:
                left.append(kid)
            members = list(self._members(key, kid, was_alone))
            self._groups[kid] = members + list(urls)
        self._alone.remove(np.array(left, dtype=np.int64))
        self._alone.insert(np.array(joined, dtype=np.int64), np.array(joined_ids, np.int64))

    def __len__(self) -> int:
        return self._pages
