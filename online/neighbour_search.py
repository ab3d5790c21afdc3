"""Related pages for a batch's events, each found as of its place in the stream.

One search against the index as it stood before the batch, merged with the batch's own
earlier vectors: a page whose vector the batch changed is not found by its old vector after
the change, and a page the batch brought is found by the events after it. Similarities are
then recomputed exactly, the same way for every candidate, so the neighbours do not depend on
which search path found them, nor on how a stream was cut into batches.

A page's related pages are searched again only when its vector has moved materially since the
one they were found with (`moved_materially`): real pages drift a little on most fetches, and
a search on every drift would be most of the work. A page whose vector changed without moving
that far still takes its new vector into the index (and is found by it), only its own search
is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

import numpy as np

from online.fetch import Fetch
from online.history import Kind
from online.index import VectorIndex, neighbour_weights
from online.kernels import direction_cosine, gathered_dots, top_k_rows
from online.stores import (
    DIRECTION_DIMS,
    ID_PREFIX_SHIFT,
    Neighbours,
    compact_direction,
    new_neighbours,
    to_byte_grid,
)

#: Extra candidates fetched beyond k, so near-ties at the k-th place are settled by the exact
#: recomputed similarities rather than by the search path.
_MARGIN = 5
#: Extra index candidates searched beyond k + `_MARGIN`, for those a row cannot take: pages
#: the batch moved before it. A row that loses more than these is searched again as wide as
#: the batch could need (`finish_search`), so this sets the cost, not the result.
_SLACK = 8
#: Query rows per index search task: the search thread takes them in order, and those it has
#: not started when the batch's other work is done are searched by the main thread.
_SEARCH_CHUNK = 128
#: A page's related pages are searched again when the cosine similarity of its vector to the
#: one they were found with falls below this (`PipelineConfig.drift_similarity`); chosen by
#: measurement on drifting crawls (bench/drift_neighbours.py, docs/benchmarks.md).
DEFAULT_DRIFT_SIMILARITY = 0.995
#: A page whose vector changed, however little, has its related pages searched again once the
#: index has grown this much since they were found (`PipelineConfig.drift_growth`): the search
#: that a drift postpones would also have brought the pages indexed since.
DEFAULT_DRIFT_GROWTH = 1.1


def candidates_searched(k: int) -> int:
    """The candidates a search asks the index for to find ``k`` related pages: the margin
    and the slack above, and the page itself (left out by the index); all are re-scored
    from the stored vectors."""
    return k + _MARGIN + 1 + _SLACK


def moved_materially(
    vector: np.ndarray, found_with: np.ndarray | None, threshold: float, found_cos: float = 1.0
) -> bool:
    """Whether a page whose vector changed to ``vector`` needs its related pages searched
    again: its cosine similarity to the vector they were found with is below ``threshold``.

    That vector is known by its direction codes (``found_with``, 4 bits a dimension:
    `online.stores.direction_codes`; in the compact store, of its random projection to
    `online.stores.DIRECTION_DIMS` dimensions, ``vector`` then projected the same way:
    `online.stores.compact_direction`) and their cosine to it (``found_cos``). The codes' own
    error is about orthogonal to both the old vector and the drift from it, so the cosine to
    the old vector is the cosine to the codes divided by ``found_cos``: coarse codes then do
    not count as a move (without the division, 4-bit codes alone sit about 0.007 below a
    cosine of 1, past the default threshold's 0.005). An unknown direction (None: neighbours
    stored before it was kept), a zero vector and a threshold of 1 or more always search."""
    if found_with is None or threshold >= 1.0:
        return True
    v = np.asarray(vector).reshape(-1)
    if found_with.size != v.size:  # the compact store's projected direction (or not this one's)
        if found_with.size != DIRECTION_DIMS or v.size <= DIRECTION_DIMS:
            return True
        v = compact_direction(v)
    if v.dtype != np.float32:
        v = v.astype(np.float64)
    cos = direction_cosine(np.ascontiguousarray(v), np.ascontiguousarray(found_with, np.int8))
    if not (cos == cos and found_cos > 0.0):  # a zero vector or direction: search
        return True
    return cos / found_cos < threshold


def resolve_short_ids(
    stored: dict[int, Neighbours | None], index: VectorIndex
) -> dict[int, Neighbours | None]:
    """Stored related-page lists with the pages they name: a list kept with short ids
    (`Neighbours.short_ids`, the compact store's) has each id found again in the index from
    its top bits (`online.stores.ID_PREFIX_SHIFT`). A list naming a page the index cannot
    name (none, or several pages with those bits) comes back as None: searched again, as a
    page without related pages is. Lists in memory hold the whole ids; they are looked up
    the same way, so every store gives the same lists."""
    short = [(pid, nb) for pid, nb in stored.items() if nb is not None and nb.short_ids]
    if not short:
        return stored
    prefixes = np.concatenate([nb.ids for _, nb in short]) >> ID_PREFIX_SHIFT
    found = index.with_prefixes(prefixes, ID_PREFIX_SHIFT)
    out = dict(stored)
    at = 0
    for pid, nb in short:
        ids = found[at : at + len(nb.ids)]
        at += len(nb.ids)
        out[pid] = replace(nb, ids=ids) if (ids >= 0).all() else None
    return out


@dataclass(slots=True)
class PlannedEvent:
    """One event as the plan stage saw it: applied, duplicate or stale; the vector it gives
    its page in the index, if any (``vector``: a new one, or the indexed one for a search);
    whether its related pages are searched now (``search``, from ``vector``, whose direction
    is ``found_with``); its page's stored neighbours."""

    event: Fetch
    page_id: int
    kind: Kind
    vector: np.ndarray | None = None
    vector_fp: int = 0
    search: bool = False
    neighbours: Neighbours | None = None
    indexed_fp: int = 0
    found_with: np.ndarray | None = None
    found_cos: float = 1.0

    def planned_vector(self) -> np.ndarray:
        """The vector its search uses (every event planned for a search has one)."""
        assert self.vector is not None
        return self.vector


@dataclass(slots=True)
class Search:
    """A batch's index search in flight: the rows that bring a vector (``todo``), their query
    data, which of them need neighbours (``asks``, row positions) and the search of each chunk
    of those (``(future, start, end)``, positions in ``asks``)."""

    todo: list[PlannedEvent]
    queries: np.ndarray | None = None
    ids: np.ndarray | None = None
    asks: np.ndarray | None = None
    size_before: int = 0
    in_index: np.ndarray | None = None
    moved: np.ndarray | None = None
    k: int = 0
    #: the search width no row can need more than: k + margin, the row's own page and every
    #: indexed page the batch moves
    widest: int = 0
    #: rows searched again that wide (they lost more than the slack to pages moved before them)
    widened: int = 0
    parts: list[tuple[Future, int, int]] = field(default_factory=list)

    def found(self, index: VectorIndex) -> np.ndarray:
        """The candidate ids of every row. Chunks the search thread has not started yet are
        searched here, from the last one back, while it works forward: the caller would
        only wait for them."""
        assert self.queries is not None and self.ids is not None and self.asks is not None
        if not self.parts:
            return np.full((len(self.asks), 0), -1, np.int64)
        found: list[np.ndarray | None] = [None] * len(self.parts)
        for at in range(len(self.parts) - 1, -1, -1):
            future, lo, hi = self.parts[at]
            if not future.cancel():
                break  # started: so are all before it
            rows = self.asks[lo:hi]
            found[at] = index.search(self.queries[rows], self.k, self.ids[rows])[1]
        for at, (future, _, _) in enumerate(self.parts):
            if found[at] is None:
                found[at] = future.result()[1]
        return np.concatenate([rows for rows in found if rows is not None])

    def wait(self) -> None:
        wait([future for future, _, _ in self.parts])


def start_search(
    index: VectorIndex,
    todo: list[PlannedEvent],
    k: int,
    searcher: Callable[[], ThreadPoolExecutor],
) -> Search:
    """Start the index search for the events of ``todo`` that need ``k`` neighbours (see
    `finish_search`) in the ``searcher``'s thread; FAISS holds no GIL while it runs, so the
    caller's own work goes on meanwhile. ``todo``: the events that bring their page a vector,
    in stream order, those that search and those that only move their page."""
    if not todo:
        return Search(todo)
    # As the index stores them: a page's similarity to another is then the same number
    # whether the other is found in the index or earlier in this batch.
    queries = index.stored(np.stack([p.planned_vector() for p in todo]))
    ids = np.array([p.page_id for p in todo], dtype=np.int64)
    size_before = len(index)
    in_index = index.contains_many(ids)
    # A row "moves" its page when it brings a vector other than the indexed one.
    moved = np.array([p.vector_fp != p.indexed_fp for p in todo], dtype=bool)
    # Candidates from the pre-batch index, without pages moved by an earlier row: a few more
    # than needed, and the rows that lose more than those searched again (`finish_search`).
    widest = min(k + _MARGIN + 1 + int((moved & in_index).sum()), size_before)
    base_k = min(candidates_searched(k), widest)
    asks = np.array([row for row, p in enumerate(todo) if p.search], dtype=np.int64)
    search = Search(todo, queries, ids, asks, size_before, in_index, moved, base_k, widest)
    if base_k > 0:
        searcher = searcher()
        for lo in range(0, len(asks), _SEARCH_CHUNK):
            hi = min(lo + _SEARCH_CHUNK, len(asks))
            rows = asks[lo:hi]
            future = searcher.submit(index.search, queries[rows], base_k, ids[rows])
            search.parts.append((future, lo, hi))
    return search


def finish_search(
    index: VectorIndex, search: Search, k: int, *, half: bool = True
) -> tuple[dict[int, Neighbours], tuple[np.ndarray, np.ndarray] | None]:
    """Neighbours for the events that need them, each as of its place in the stream, their
    weights rounded to a byte each (``half``: the compact store, which keeps them so:
    `online.stores.to_byte_grid`).

    Candidates come from the index as it stood before the batch (minus pages whose vector
    changed earlier in the batch) and from the vectors the batch itself set before the
    event (searched with or not); similarities are then recomputed exactly, the same way for
    every candidate, so the result does not depend on which search path found it. The batch's
    vectors are returned with the neighbours (ids, vectors; None when none changed), for the
    caller to write into the index once the batch's reads are done.
    """
    todo = search.todo
    if not todo:
        return {}, None
    n = len(todo)
    queries, ids, asks = search.queries, search.ids, search.asks
    assert queries is not None and ids is not None and asks is not None
    in_index, moved = search.in_index, search.moved
    assert in_index is not None and moved is not None
    latest = {p.page_id: p for p, m in zip(todo, moved, strict=True) if m}
    writes = None
    if latest:
        writes = (
            np.array(list(latest), dtype=np.int64),
            np.stack([p.planned_vector() for p in latest.values()]).astype(np.float32),
        )
    if not len(asks):
        return {}, writes
    ask_ids = ids[asks]
    found = search.found(index)
    # The first row at which each found page is moved by the batch (n: never).
    move_rows = np.flatnonzero(moved)
    move_ids, first = np.unique(ids[move_rows], return_index=True)
    moved_first = move_ids, move_rows[first]
    index_ok = _index_candidates(found, ask_ids, asks, moved_first, n)
    found, index_ok = _first_candidates(index, search, found, index_ok, k + _MARGIN, moved_first)

    # Candidates from the batch: earlier rows that moved their page and are still its
    # latest vector at this row (only the rows that moved one can be).
    ask_queries = queries[asks]
    wide = min(k + _MARGIN, n)
    batch_rows, batch_ok = _batch_candidates(ask_queries, queries, ids, asks, move_rows, wide)

    cand_ids = np.concatenate([np.where(index_ok, found, -1), ids[batch_rows]], axis=1)
    # Stored vectors of the index candidates, each page's once; -1: an empty slot.
    unique, inverse = np.unique(found[index_ok], return_inverse=True)
    stored = (
        index.reconstruct_many(unique)
        if len(unique)
        else np.zeros((0, queries.shape[1]), np.float32)
    )
    index_rows = np.full(found.shape, -1, dtype=np.int64)
    index_rows[index_ok] = inverse.reshape(-1)
    # Each pair's product summed in one fixed order, so that a pair of vectors gets the same
    # similarity whatever the batch, unlike BLAS kernels chosen by shape.
    sims = np.empty(cand_ids.shape, dtype=np.float32)
    ask_queries = np.ascontiguousarray(ask_queries, dtype=np.float32)
    gathered_dots(np.ascontiguousarray(stored, dtype=np.float32), index_rows, ask_queries, sims)
    batch_candidates = np.where(batch_ok, batch_rows, -1).astype(np.int64, copy=False)
    gathered_dots(queries, batch_candidates, ask_queries, sims, found.shape[1])
    order = np.lexsort((cand_ids, -sims), axis=-1)[:, :k]
    best_ids = np.take_along_axis(cand_ids, order, axis=1)
    best_sims = np.take_along_axis(sims, order, axis=1)
    best_ids = np.where(np.isfinite(best_sims), best_ids, -1)
    weights = neighbour_weights(np.where(best_ids >= 0, best_sims, 0.0), best_ids)
    weights = to_byte_grid(weights) if half else weights.astype(np.float32)
    new_so_far = np.cumsum(~in_index & _first_occurrence(ids))

    out: dict[int, Neighbours] = {}
    for at, row in enumerate(asks.tolist()):
        p = todo[row]
        keep = weights[at] > 0
        out[id(p)] = new_neighbours(
            best_ids[at][keep],
            weights[at][keep],
            search.size_before + int(new_so_far[row]),
            p.found_with,
            p.found_cos,
            half,
        )
    return out, writes


def _batch_candidates(
    ask_queries: np.ndarray,
    queries: np.ndarray,
    ids: np.ndarray,
    asks: np.ndarray,
    move_rows: np.ndarray,
    wide: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per asking row, the ``wide`` rows of the batch most similar to it among those whose
    vector it may take (rows, in no order, and whether each may be taken; unused slots
    False): a row before it that moved another page and is still that page's latest vector
    at the asking row (no row between moved the page again). Only moving rows are compared,
    which in a batch of pages whose vectors stay put are few."""
    m = len(asks)
    moved_ids = ids[move_rows]
    # Each moving row's next moving row of the same page (len(ids): none).
    by_page = np.lexsort((move_rows, moved_ids))
    rows_sorted, ids_sorted = move_rows[by_page], moved_ids[by_page]
    following = np.full(len(move_rows), len(ids), dtype=np.int64)
    same = ids_sorted[1:] == ids_sorted[:-1]
    following[by_page[:-1][same]] = rows_sorted[1:][same]
    ok = (
        (move_rows[None, :] < asks[:, None])
        & (following[None, :] >= asks[:, None])
        & (moved_ids[None, :] != ids[asks][:, None])
    )
    take = min(wide, len(move_rows))
    rows = np.zeros((m, wide), dtype=np.int64)
    taken = np.zeros((m, wide), dtype=bool)
    if take:
        inner = np.where(ok, ask_queries @ queries[move_rows].T, -np.inf)
        best = top_k_rows(np.ascontiguousarray(inner, np.float32), take)[1]  # -1: none left
        found = best >= 0
        best = np.where(found, best, 0)
        rows[:, :take] = move_rows[best]
        taken[:, :take] = found & np.take_along_axis(ok, best, axis=1)
    return rows, taken


def _index_candidates(
    found: np.ndarray,
    ask_ids: np.ndarray,
    asks: np.ndarray,
    moved_first: tuple[np.ndarray, np.ndarray],
    n: int,
) -> np.ndarray:
    """Which found ids a row may take: not its own page, nor a page the batch moved before
    it (``moved_first``: the moved pages' ids, sorted, and the row that first moved each)."""
    move_ids, first_row = moved_first
    moved_at = np.full(found.shape, n, dtype=np.int64)
    if len(move_ids):
        pos = np.minimum(np.searchsorted(move_ids, found), len(move_ids) - 1)
        hit = move_ids[pos] == found
        moved_at[hit] = first_row[pos[hit]]
    return (found >= 0) & (found != ask_ids[:, None]) & (moved_at >= asks[:, None])


def _first_candidates(
    index: VectorIndex,
    search: Search,
    found: np.ndarray,
    ok: np.ndarray,
    width: int,
    moved_first: tuple[np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first ``width`` candidates it may take, in the index's order (-1 and False
    where it has fewer). A row the search left short (fewer than ``width`` it may take from a
    full result) is searched again as wide as any row can need, so what a row keeps does not
    depend on how wide it was searched first."""
    assert search.asks is not None and search.ids is not None and search.queries is not None
    out = _take_first(found, ok, width)
    if not found.shape[1] or search.widest <= found.shape[1]:
        return out, out >= 0
    again = np.flatnonzero((ok.sum(axis=1) < width) & (found[:, -1] >= 0))
    search.widened = len(again)
    if len(again):
        rows = search.asks[again]
        wide = index.search(search.queries[rows], search.widest, search.ids[rows])[1]
        wide_ok = _index_candidates(wide, search.ids[rows], rows, moved_first, len(search.todo))
        out[again] = _take_first(wide, wide_ok, width)
    return out, out >= 0


def _take_first(found: np.ndarray, ok: np.ndarray, width: int) -> np.ndarray:
    """Per row, the first ``width`` of ``found`` where ``ok``, packed left, -1 after."""
    out = np.full((len(found), width), -1, dtype=np.int64)
    rank = np.cumsum(ok, axis=1) - 1
    keep = ok & (rank < width)
    row_of = np.broadcast_to(np.arange(len(found))[:, None], found.shape)
    out[row_of[keep], rank[keep]] = found[keep]
    return out


def _first_occurrence(ids: np.ndarray) -> np.ndarray:
    first = np.zeros(len(ids), dtype=bool)
    first[np.unique(ids, return_index=True)[1]] = True
    return first
