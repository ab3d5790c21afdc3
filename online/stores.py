"""What the pipeline keeps per page, behind one small store interface.

Three records per page: its history state (keyed by URL), its stats row (what it lends its
neighbours, keyed by page id) and its related-page list (keyed by page id). The embedded replay
keeps them in memory (`MemoryPageStore`); the live workers keep them in Redis. Both go through
`PageStore`, so the pipeline cannot tell them apart.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from online.features import N_STATS
from online.history import PageState
from online.links import url_id
from online.related_updates import GroupGain, SiblingFollow, SiblingGroup
from online.schedule import Allocation


@dataclass(frozen=True, slots=True)
class Neighbours:
    """A page's related pages: ids, weights summing to 1, the index size when found and the
    direction of the vector they were found with (`direction_codes`; None: unknown).

    Stored as bytes, versioned: version 2 carries the found-with direction (int8 codes), and
    version 1, written before it was kept, is still read, its direction unknown.
    """

    ids: np.ndarray
    weights: np.ndarray
    index_size: int
    found_with: np.ndarray | None = None

    _HEAD = struct.Struct("<BIH")
    _DIM = struct.Struct("<H")

    def to_bytes(self) -> bytes:
        body = self.ids.astype("<i8").tobytes() + self.weights.astype("<f4").tobytes()
        if self.found_with is None:
            return self._HEAD.pack(1, self.index_size, len(self.ids)) + body
        codes = self.found_with.astype(np.int8)
        return (
            self._HEAD.pack(2, self.index_size, len(self.ids))
            + self._DIM.pack(len(codes))
            + body
            + codes.tobytes()
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Neighbours:
        version, index_size, n = cls._HEAD.unpack_from(data, 0)
        if version not in (1, 2):
            raise ValueError("unknown neighbours format")
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
        return cls(ids.astype(np.int64), weights.astype(np.float32), index_size, found_with)


def direction_codes(vector: np.ndarray) -> np.ndarray:
    """A vector's direction in one byte a dimension: int8 codes proportional to it (the
    largest component at +-127). What a page's related pages were found with is kept this
    way (`Neighbours.found_with`); a cosine similarity needs no more than the direction."""
    v = np.asarray(vector, dtype=np.float64).reshape(-1)
    top = float(np.max(np.abs(v))) if v.size else 0.0
    if not np.isfinite(top) or top == 0.0:
        return np.zeros(v.size, dtype=np.int8)
    return np.rint(v * (127.0 / top)).astype(np.int8)


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


def merge_records(target: PageWrites | MemoryPageStore, writes: PageWrites) -> None:
    """Lay ``writes`` over ``target``'s per-page records (states, neighbours, rows, siblings,
    group gains) and its learner, sibling-follow state and allocation where the batch changed
    them; stats rows are each holder's own to keep."""
    target.states.update(writes.states)
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
    ids = np.fromiter((url_id(u) for u in urls), dtype=np.int64, count=len(urls))
    return SiblingGroup(tuple(urls), ids, gain)


class PageStore(Protocol):
    def get_states(self, urls: Sequence[str]) -> list[PageState | None]: ...

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
        self._stats_row: dict[int, int] = {}
        self._stats = np.full((1024, N_STATS), np.nan, dtype=np.float32)
        # Sorted page ids and their stats rows: a batch's ~20k neighbour lookups are one
        # binary search instead of 20k dict lookups.
        self._sorted_ids = np.empty(0, dtype=np.int64)
        self._sorted_rows = np.empty(0, dtype=np.int64)

    def get_states(self, urls: Sequence[str]) -> list[PageState | None]:
        return [self.states.get(url) for url in urls]

    def get_neighbours(self, page_ids: Sequence[int]) -> list[Neighbours | None]:
        return [self.neighbours.get(pid) for pid in page_ids]

    def get_stats(self, page_ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(page_ids, dtype=np.int64)
        known = self._sorted_ids
        if not len(known):
            return np.full((len(ids), N_STATS), np.nan, dtype=np.float32)
        pos = np.minimum(np.searchsorted(known, ids), len(known) - 1)
        found = known[pos] == ids
        out = self._stats[np.where(found, self._sorted_rows[pos], 0)]
        out[~found] = np.nan
        return out

    def get_rows(self, page_ids: Sequence[int]) -> list[np.ndarray | None]:
        return [self.rows.get(pid) for pid in page_ids]

    def get_learner(self) -> object | None:
        return self.learner

    def get_siblings(self, keys: Sequence[str]) -> list[SiblingGroup]:
        return [sibling_group(self.siblings.get(key, ()), self.gains.get(key)) for key in keys]

    def get_follow(self) -> SiblingFollow | None:
        return self.follow

    def get_allocation(self) -> Allocation | None:
        return self.allocation

    def stats(self, page_id: int) -> np.ndarray | None:
        row = self._stats_row.get(page_id)
        return None if row is None else self._stats[row].copy()

    def write(self, writes: PageWrites) -> None:
        merge_records(self, writes)
        added: list[int] = []
        rows: list[int] = []
        for pid in writes.stats:
            row = self._stats_row.get(pid)
            if row is None:
                row = self._stats_row[pid] = len(self._stats_row)
                added.append(pid)
            rows.append(row)
        if len(self._stats_row) > len(self._stats):
            size = max(2 * len(self._stats), len(self._stats_row))
            grown = np.full((size, N_STATS), np.nan, dtype=np.float32)
            grown[: len(self._stats)] = self._stats
            self._stats = grown
        if rows:  # one assignment for the batch (the dict holds one row per page)
            self._stats[rows] = np.stack(list(writes.stats.values()))
        if added:
            new_ids = np.array(added, dtype=np.int64)
            order = np.argsort(new_ids)
            new_rows = np.arange(len(self._stats_row) - len(added), len(self._stats_row))
            at = np.searchsorted(self._sorted_ids, new_ids[order])
            self._sorted_ids = np.insert(self._sorted_ids, at, new_ids[order])
            self._sorted_rows = np.insert(self._sorted_rows, at, new_rows[order])

    def __len__(self) -> int:
        return len(self.states)
