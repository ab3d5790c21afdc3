"""What the pipeline keeps per page, behind one small store interface.

Three records per page: its history state (keyed by URL), its stats row (what it lends its
neighbours, keyed by page id) and its related-page list (keyed by page id). The embedded replay
keeps them in memory (`MemoryPageStore`); the live workers keep them in Redis. Both go through
`PageStore`, so the pipeline cannot tell them apart.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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


@dataclass
class PageWrites:
    """Everything one batch changed, written in one go (one Redis pipeline)."""

    states: dict[str, PageState]
    stats: dict[int, np.ndarray]
    neighbours: dict[int, Neighbours]


class PageStore(Protocol):
    def get_states(self, urls: Sequence[str]) -> list[PageState | None]: ...

    def get_neighbours(self, page_ids: Sequence[int]) -> list[Neighbours | None]: ...

    def get_stats(self, page_ids: Iterable[int]) -> Mapping[int, np.ndarray]: ...

    def write(self, writes: PageWrites) -> None: ...


class MemoryPageStore:
    """The embedded default: plain dicts in this process."""

    def __init__(self) -> None:
        self.states: dict[str, PageState] = {}
        self.stats: dict[int, np.ndarray] = {}
        self.neighbours: dict[int, Neighbours] = {}

    def get_states(self, urls: Sequence[str]) -> list[PageState | None]:
        return [self.states.get(url) for url in urls]

    def get_neighbours(self, page_ids: Sequence[int]) -> list[Neighbours | None]:
        return [self.neighbours.get(pid) for pid in page_ids]

    def get_stats(self, page_ids: Iterable[int]) -> Mapping[int, np.ndarray]:
        return {pid: row for pid in page_ids if (row := self.stats.get(pid)) is not None}

    def write(self, writes: PageWrites) -> None:
        self.states.update(writes.states)
        self.stats.update(writes.stats)
        self.neighbours.update(writes.neighbours)

    def __len__(self) -> int:
        return len(self.states)
