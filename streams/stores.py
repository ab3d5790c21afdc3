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


@dataclass(frozen=True, slots=True)
class Neighbours:
    """A page's related pages: ids, weights summing to 1, and the index size when found."""

    ids: np.ndarray
    weights: np.ndarray
    index_size: int

    _HEAD = struct.Struct("<BIH")

    def to_bytes(self) -> bytes:
        return (
            self._HEAD.pack(1, self.index_size, len(self.ids))
            + self.ids.astype("<i8").tobytes()
            + self.weights.astype("<f4").tobytes()
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Neighbours:
        version, index_size, n = cls._HEAD.unpack_from(data, 0)
        if version != 1:
            raise ValueError("unknown neighbours format")
        offset = cls._HEAD.size
        ids = np.frombuffer(data, dtype="<i8", count=n, offset=offset)
        weights = np.frombuffer(data, dtype="<f4", count=n, offset=offset + 8 * n)
        return cls(ids.astype(np.int64), weights.astype(np.float32), index_size)


def stats_to_bytes(row: np.ndarray) -> bytes:
    return row.astype("<f4").tobytes()


def stats_from_bytes(data: bytes) -> np.ndarray:
    row = np.frombuffer(data, dtype="<f4")
    if row.shape != (N_STATS,):
        raise ValueError(f"stats row of {row.size} values, expected {N_STATS}")
    return row.astype(np.float32)


def row_to_bytes(row: np.ndarray) -> bytes:
    return row.astype("<f4").tobytes()


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

    def write(self, writes: PageWrites) -> None: ...


class MemoryPageStore:
    """The embedded default: dicts and one growing stats matrix in this process."""

    def __init__(self) -> None:
        self.states: dict[str, PageState] = {}
        self.neighbours: dict[int, Neighbours] = {}
        self.rows: dict[int, np.ndarray] = {}
        self.learner: object | None = None
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

    def stats(self, page_id: int) -> np.ndarray | None:
        row = self._stats_row.get(page_id)
        return None if row is None else self._stats[row].copy()

    def write(self, writes: PageWrites) -> None:
        self.states.update(writes.states)
        self.neighbours.update(writes.neighbours)
        self.rows.update(writes.rows)
        if writes.learner is not None:
            self.learner = writes.learner
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
