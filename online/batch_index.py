"""A batch's use of the vector index: its search in a thread, its writes held back and undoable.

The search starts as soon as the plan is made and runs in a thread (FAISS releases the GIL)
while the history is applied. The vectors the batch brings are written only after the batch's
last store read, so a read that fails leaves the index as it was; and what they replaced is
remembered, so a batch that fails later (an event's fault, isolated by
`online.isolation.isolate`) can be undone before it is retried.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import faiss
import numpy as np

from online.index import VectorIndex
from online.neighbour_search import PlannedEvent, Search, finish_search, start_search
from online.stores import Neighbours


class BatchIndex:
    """The index as one batch at a time searches and changes it."""

    def __init__(self, index: VectorIndex, neighbours: int, *, half: bool = True) -> None:
        self.index = index
        self.neighbours = neighbours
        #: related-page weights rounded to half precision, as stored (`PipelineConfig`)
        self.half = half
        #: the current batch's vectors, waiting for its last store read: (ids, vectors)
        self._writes: tuple[np.ndarray, np.ndarray] | None = None
        #: how to undo the current batch's index writes: (ids, which were there, their vectors)
        self._undo: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self._pool: ThreadPoolExecutor | None = None

    def start_search(self, pending: list[PlannedEvent]) -> Search:
        """Start the search for the events the plan marked (`online.neighbour_search`); the
        batch's index writes are what that search will leave."""
        self._writes = None
        todo = [p for p in pending if p.vector is not None]
        return start_search(self.index, todo, self.neighbours, self._searcher)

    def finish_search(self, search: Search) -> dict[int, Neighbours]:
        """The searched events' neighbours (by the plan's id()); their vectors wait until
        `write`."""
        found, writes = finish_search(self.index, search, self.neighbours, half=self.half)
        if writes is not None:
            self._writes = writes
        return found

    def write(self) -> None:
        """The batch's new vectors into the index, after the last store read, remembering how
        to undo them should the batch fail."""
        self._undo = None
        if self._writes is None:
            return
        ids = self._writes[0]
        present = self.index.contains_many(ids)
        before = self.index.reconstruct_many(ids[present]) if present.any() else None
        self._undo = (ids, present, before)
        self.index.upsert(*self._writes)
        self._writes = None

    def discard(self, *, undo: bool) -> None:
        """Forget the vectors waiting for `write`; with ``undo``, also put back what the last
        `write` replaced (the pages it added leave the index)."""
        self._writes = None
        if undo and self._undo is not None:
            ids, present, vectors = self._undo
            added = ids[~present]
            if len(added):
                self.index.remove(added)
            if vectors is not None:
                self.index.upsert(ids[present], vectors)
        self._undo = None

    def _searcher(self) -> ThreadPoolExecutor:
        if self._pool is None:
            threads = self.index.threads
            self._pool = ThreadPoolExecutor(
                1, "index-search", initializer=faiss.omp_set_num_threads, initargs=(threads,)
            )
        return self._pool
