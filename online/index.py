"""The related-page index: the k nearest pages of a page by cosine similarity.

In the paper a page's *related pages* are its k=30 nearest neighbours among the indexed
pages by cosine similarity of unit semantic vectors, weighted proportionally to that
similarity. This module holds:

* :class:`VectorIndex`, the small interface the rest of the core depends on, and
  :class:`FaissIndex`, its FAISS implementation for the online, incrementally updated
  index (exact while small, IVF once large);
* :func:`neighbour_weights`, the paper's similarity-proportional weights;
* :func:`exact_search` and :func:`recall_at_k`, the numpy references tests and benchmarks
  measure against.

>>> rng = np.random.default_rng(0)
>>> vecs = rng.standard_normal((5, 4)).astype(np.float32)
>>> vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
>>> index = FaissIndex(dim=4)
>>> index.upsert(np.arange(10, 15), vecs)
>>> sims, ids = index.search(vecs[:1], k=2, exclude=np.array([10]))
>>> len(index), bool(10 in ids[0]), ids.shape
(5, False, (1, 2))
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import faiss
import numpy as np

from online.byte_grid import ByteGrid
from online.centroid_ranking import CentroidRanking
from online.id_rows import IdRows
from online.kernels import gather_half

__all__ = [
    "FaissIndex",
    "VectorIndex",
    "default_nlist",
    "drop_excluded",
    "exact_search",
    "neighbour_weights",
    "recall_at_k",
    "size_for_more_lists",
]


@runtime_checkable
class VectorIndex(Protocol):
    """What the core needs from a related-page index (FAISS, a replica, a test double).

    Ids are int64 page ids (``-1`` is reserved for "no result"); vectors are float32 unit
    vectors, so inner product = cosine similarity. ``upsert`` replaces a present id
    (a recrawled page gets a new vector, never a second entry) and, within one call, the
    last occurrence of an id wins. ``search`` returns ``(similarities (n, k) float32,
    ids (n, k) int64)``, best first, leaving ``exclude[i]`` out of row i; missing slots
    are id -1 with similarity 0; an approximate index may rank by approximate similarities
    (the core re-scores its candidates from stored vectors). ``contains_many``: whether each
    id is indexed (a bool array). ``reconstruct`` / ``reconstruct_many`` give back stored
    vectors (None / KeyError for pages not indexed); ``stored`` gives vectors as the index
    would store them (e.g. rounded to half precision), so a caller can compare its own
    vectors with stored ones on equal terms. ``next_switch``: the size at which the search
    next changes (exact to approximate, or a retrained index taking over; None: no change
    ahead), so a caller can split a batch there and search each part as the index then is;
    ``threads``: the threads a search may use.
    """

    dim: int
    threads: int

    @property
    def next_switch(self) -> int | None: ...

    def stored(self, vectors: np.ndarray) -> np.ndarray: ...

    def __len__(self) -> int: ...

    def __contains__(self, page_id: object) -> bool: ...

    def contains_many(self, page_ids: np.ndarray) -> np.ndarray: ...

    def with_prefixes(self, prefixes: np.ndarray, shift: int) -> np.ndarray: ...

    def upsert(self, ids: np.ndarray, vectors: np.ndarray) -> None: ...

    def remove(self, ids: np.ndarray) -> None: ...

    def search(
        self, vectors: np.ndarray, k: int, exclude: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def reconstruct(self, page_id: int) -> np.ndarray | None: ...

    def reconstruct_many(self, page_ids: np.ndarray) -> np.ndarray: ...


# ---------------------------------------------------------------------------------------
# shared helpers


def _as_ids(ids: np.ndarray | list[int] | int) -> np.ndarray:
    arr = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(-1))
    if np.any(arr == -1):
        raise ValueError("id -1 is reserved for 'no result'")
    return arr


def _as_matrix(vectors: np.ndarray, dim: int) -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise ValueError(f"expected vectors of shape (n, {dim}), got {np.shape(vectors)}")
    return np.ascontiguousarray(arr)


def drop_excluded(
    sims: np.ndarray, ids: np.ndarray, k: int, exclude: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Results searched with k+1 slots -> exactly k slots without ``exclude[i]`` in row i.

    A stable sort on "is excluded" moves the excluded id (at most one per row) to the end
    and keeps the rest in rank order; rows without it simply lose their last slot.
    """
    if exclude is not None:
        excl = np.asarray(exclude, dtype=np.int64).reshape(-1, 1)
        if excl.shape[0] != ids.shape[0]:
            raise ValueError("exclude needs one id per query")
        hit = ids == excl
        order = np.argsort(hit, axis=1, kind="stable")
        sims = np.take_along_axis(sims, order, axis=1)
        ids = np.where(
            np.take_along_axis(hit, order, axis=1), -1, np.take_along_axis(ids, order, axis=1)
        )
    out_s = np.zeros((ids.shape[0], k), np.float32)
    out_i = np.full((ids.shape[0], k), -1, np.int64)
    width = min(k, ids.shape[1])
    out_i[:, :width] = ids[:, :width]
    out_s[:, :width] = np.where(out_i[:, :width] >= 0, sims[:, :width], 0.0)
    return out_s, out_i


def exact_search(
    matrix: np.ndarray,
    ids: np.ndarray,
    queries: np.ndarray,
    k: int,
    exclude: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force reference of :meth:`VectorIndex.search` in plain numpy (for tests).

    Ties are broken by position in ``matrix``.

    >>> m = np.eye(3, dtype=np.float32)
    >>> exact_search(m, np.array([7, 8, 9]), m[:1], k=2, exclude=np.array([7]))[1].tolist()
    [[8, 9]]
    """
    queries = np.asarray(queries, dtype=np.float32)
    queries = _as_matrix(queries, queries.shape[-1])
    matrix = np.asarray(matrix, dtype=np.float32).reshape(len(ids), queries.shape[1])
    ids = np.asarray(ids, dtype=np.int64)
    sims = queries @ matrix.T
    if exclude is not None:
        excl = np.asarray(exclude, dtype=np.int64).reshape(-1, 1)
        sims = np.where(ids[None, :] == excl, -np.inf, sims)
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(sims, order, axis=1)
    out_ids = ids[order] if len(ids) else np.empty(order.shape, np.int64)
    out_ids = np.where(np.isfinite(top), out_ids, -1)
    out_s = np.zeros((len(queries), k), np.float32)
    out_i = np.full((len(queries), k), -1, np.int64)
    out_s[:, : order.shape[1]] = np.where(out_ids >= 0, top, 0.0)
    out_i[:, : order.shape[1]] = out_ids
    return out_s, out_i


def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    """Mean fraction of each row's exact neighbours (ids >= 0) found in the approximate row.

    >>> recall_at_k(np.array([[1, 2, 3]]), np.array([[1, 3, 4]]))
    0.6666666666666666
    """
    approx = np.asarray(approx_ids)
    exact = np.asarray(exact_ids)
    if approx.shape[0] != exact.shape[0]:
        raise ValueError("approx_ids and exact_ids need the same number of rows")
    found = total = 0
    for a, e in zip(approx, exact, strict=True):
        truth = e[e >= 0]
        total += len(truth)
        found += int(np.isin(truth, a[a >= 0]).sum())
    return found / total if total else 1.0


def neighbour_weights(similarities: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The paper's related-page weights: proportional to cosine similarity, rows sum to 1.

    Negative similarities are clipped to 0 (an opposed page is not related) and missing
    slots (id -1) weigh 0; a row with no positive similarity is all zeros, so the page
    simply gets no look-around signal.

    >>> neighbour_weights(np.array([[0.6, 0.2, -0.5, 0.9]]), np.array([[4, 5, 6, -1]]))
    array([[0.75, 0.25, 0.  , 0.  ]])
    """
    sims = np.asarray(similarities, dtype=np.float64)
    w = np.where(np.asarray(ids) >= 0, np.clip(sims, 0.0, None), 0.0)
    w = np.where(np.isfinite(w), w, 0.0)
    total = w.sum(axis=-1, keepdims=True)
    return np.divide(w, total, out=np.zeros_like(w), where=total > 0)


# ---------------------------------------------------------------------------------------
# online index


def default_nlist(n: int) -> int:
    """IVF list count for ``n`` training vectors: ~4*sqrt(n) as a power of two.

    Capped so that k-means sees >= 39 points per centroid (FAISS's own minimum) and at
    65,536 lists.
    """
    if n < 39:
        return 1
    target = 2 ** round(math.log2(4.0 * math.sqrt(n)))
    cap = 2 ** int(math.log2(max(1, n // 39)))
    return int(max(1, min(target, cap, 65_536)))


#: Searches of at least this many queries use FAISS's matrix-product kernels (its historical
#: default; the wheel's is far larger).
BLAS_FROM_QUERIES = 20

#: Float32 rounding allowed for in a list's margin (inner products of unit vectors).
_MARGIN_ROUNDING = 1e-5

#: Vectors added to a new IVF index a call: FAISS's own block. It bounds their codes' copy
#: (54 MB of float32 at 208 bytes a code); smaller blocks grow each list in more steps,
#: leaving more spare capacity (43 B a page more at 16,384: `python -m deploy.sizing index`).
_ADD_CHUNK = 65_536

#: Searched queries whose nearest lists the index keeps for the upserts to come: a batch's.
SEARCHES_KEPT = 65_536


def size_for_more_lists(lists: int) -> int:
    """The smallest index size whose `default_nlist` is above ``lists``.

    A search scans ``nprobe`` lists, so with the lists kept as the index grows its cost grows
    with the index; retraining at each size that calls for twice the lists keeps the pages a
    search scans near ``nprobe * n / default_nlist(n)`` (about ``nprobe * sqrt(n) / 4``).

    >>> size_for_more_lists(512), default_nlist(size_for_more_lists(512))
    (39936, 1024)
    >>> default_nlist(size_for_more_lists(2048) - 1), default_nlist(size_for_more_lists(2048))
    (2048, 4096)
    """
    if lists >= 65_536:
        return sys.maxsize
    high = 64
    while default_nlist(high) <= lists:
        high *= 2
    low = high // 2  # default_nlist(low) <= lists < default_nlist(high): it never decreases
    while high - low > 1:
        middle = (low + high) // 2
        if default_nlist(middle) > lists:
            high = middle
        else:
            low = middle
    return high


class FaissIndex:
    """The online related-page index: exact while small, IVF once it holds many pages.

    It starts as an exact inner-product index (``IndexIDMap2`` over ``IndexFlatIP``). The
    upsert that brings it to ``exact_below`` live vectors starts training an IVF index on
    exactly those vectors in a background thread (the incoming chunk is split at the
    threshold, so the result does not depend on how upserts were chunked), and the exact
    search goes on meanwhile; at ``takeover_growth`` times that size the IVF index takes over
    with the changes made since, as a retrained one does (below). A live worker so never
    stops its batches for the k-means. The IVF index keeps a hash-table direct map, so pages
    can be replaced and removed.

    The switch comes early (10,000 pages, 256 lists) and soon after its training started
    (1.1 x) because each page of the exact phase is searched against all of them: on a
    first crawl, where every event is a new page, a live worker near its rate fell behind
    between 11,000 and 22,000 pages with the switch at 20,000, and its takeover waited for
    the larger k-means. The related pages lose next to nothing: their recall@30 against
    exact search, on clustered pages grown in upserts of 1,000, is 0.996-1.0 from 12,000 to
    60,000 pages through the 256-, 512- and 1,024-list indexes (``bench/index_growth.py``).

    Same upserts and removes in the same order give the same index, and therefore the
    same search results, whatever the chunking: flat storage is compacted in order, and
    in IVF mode an upsert is applied as the equivalent sequence of single-page updates
    (removes, the only order-changing operation there, are applied one id at a time).

    Defaults are set for a pipeline sharing its cores: ``nprobe=16`` of 512 lists keeps
    recall@30 close to exact search at half the cost of 32 on generated pages;
    ``threads=1`` because FAISS's OpenMP threads spin-wait for a core that the events reader
    or Redis holds, which makes small upserts many times slower.

    ``storage="float16"`` (the default) keeps vectors in half precision: a replica takes half
    the RAM. Vectors are rounded on the way in (`stored`); the rounding moves a cosine
    similarity by about 1e-3 at most. The stored vectors are kept in a table of their own
    (`reconstruct`; a numpy gather from it is several times cheaper than FAISS's lookups);
    the IVF lists, which a search scans, keep ``codes="8bit"`` (the default): one byte a
    dimension, uniform over the range the lists were trained on, scanned as bytes by
    FAISS's integer kernels against the query put on bytes too (`online.byte_grid`). That
    halves the lists' memory against float16 and makes a scan faster, at the price of
    approximate similarities in `search` (the ids ranked by them); the core re-scores its
    candidates from the stored vectors, so its related pages are those of the stored vectors
    whenever the exact ones are among the candidates. ``codes="stored"`` keeps the lists as
    the vectors are stored.

    **Retraining as it grows.** Lists trained on the first ``exact_below`` pages become too
    few and too long as the index grows: a search scans ``nprobe`` lists, so its cost grows
    with the index, and a site's later pages may sit where the early ones had few lists.
    With ``nlist`` left to the index (None) and ``retrain_growth`` set, once the index is
    large enough for twice the lists it has (`size_for_more_lists`; 19,968, 39,936, 131,073
    and 524,288 pages from the first 256 lists) and holds at least ``retrain_growth`` times the
    pages its lists were trained on, a new IVF index with
    `default_nlist` lists for that size is trained in a background thread on a sample of
    the vectors then indexed, ``train_points_per_list`` a list (32: below the 39 under
    which FAISS's k-means warns, but at a million pages the related pages' recall@30 is
    0.991 against 0.992 with 64, and the 4,096 lists are built in 0.57 x the time, with half
    the sample in memory), and filled with them. It takes over at ``retrain_takeover_growth``
    times that size (1.5: the current lists serve well meanwhile, and a k-means of 1,024
    lists or more does not finish by 1.1 x on a first crawl's pace, where the takeover
    stopped a batch for up to a second). Both points are sizes of the index and upserts are
    split there, so the same upserts give the same index whatever their chunking, and
    `next_switch` tells a caller where to split its own batches. The changes made while it
    trains are kept and, once it is built, applied to it a share at each update
    (`_catch_up`), so few are left for the takeover: applied all at once there, a first
    crawl's 22,000 pages' changes stopped a live worker's batch for 0.8 s. The takeover
    waits for the training if it has not finished.
    ``python bench/index_growth.py`` measures what it pays at a million pages.

    >>> index = FaissIndex(dim=2, exact_below=3, nlist=1)
    >>> v = np.array([[1, 0], [0, 1], [0.6, 0.8], [0.8, 0.6]], dtype=np.float32)
    >>> index.upsert(np.array([1, 2, 3, 4]), v)
    >>> index.is_ivf, len(index)
    (True, 4)
    >>> index.upsert(np.array([1]), v[1:2])
    >>> index.reconstruct(1).tolist(), len(index)
    ([0.0, 1.0], 4)
    >>> index.search(v[1:2], k=2, exclude=np.array([2]))[1].tolist()
    [[1, 3]]
    """

    def __init__(
        self,
        dim: int = 192,
        *,
        exact_below: int = 10_000,
        nlist: int | None = None,
        nprobe: int = 16,
        seed: int = 0,
        threads: int = 1,
        storage: str = "float16",
        codes: str = "8bit",
        retrain_growth: float | None = 1.5,
        takeover_growth: float = 1.1,
        retrain_takeover_growth: float = 1.5,
        train_points_per_list: int = 32,
    ) -> None:
        if dim < 1 or exact_below < 1 or nprobe < 1 or threads < 1:
            raise ValueError("dim, exact_below, nprobe and threads must be >= 1")
        if storage not in ("float16", "float32"):
            raise ValueError(f"storage must be float16 or float32, not {storage!r}")
        if codes not in ("8bit", "stored"):
            raise ValueError(f"codes must be 8bit or stored, not {codes!r}")
        if nlist is not None and not 1 <= nlist <= exact_below:
            raise ValueError("nlist must be between 1 and exact_below")
        if retrain_growth is not None and retrain_growth <= 1.0:
            raise ValueError("retrain_growth must be above 1 (or None: never retrain)")
        if takeover_growth < 1.0 or retrain_takeover_growth < 1.0:
            raise ValueError("takeover_growth and retrain_takeover_growth must be >= 1")
        if train_points_per_list < 1:
            raise ValueError("train_points_per_list must be >= 1")
        self.dim = int(dim)
        self.exact_below = int(exact_below)
        self.nlist = nlist
        self.nprobe = int(nprobe)
        self.seed = int(seed)
        self.threads = int(threads)
        self.storage = storage
        self.codes = codes
        self.retrain_growth = retrain_growth
        self.takeover_growth = float(takeover_growth)
        self.retrain_takeover_growth = float(retrain_takeover_growth)
        self.train_points_per_list = int(train_points_per_list)
        self.retrains = 0  # retrained indexes that took over
        self._retrain_at: int | None = None  # size at which the next retraining starts
        self._retraining: _Retraining | None = None
        faiss.omp_set_num_threads(self.threads)
        # FAISS's own default sends searches of fewer queries than a large threshold to its
        # one-query-at-a-time kernels; the batch's searches come in chunks of 128 (and the
        # IVF's list assignment in an upsert's chunk), which its BLAS kernels take several
        # times faster (`python bench/index_growth.py` measures the search).
        faiss.cvar.distance_compute_blas_threshold = BLAS_FROM_QUERIES
        # page id -> row of `_vectors`, where the page's stored vector is kept
        self._rows_of = IdRows()
        self._vectors = np.empty((0, self.dim), np.float16 if storage == "float16" else np.float32)
        self._used = 0  # rows handed out so far
        self._free: list[int] = []  # rows of removed pages, reused first
        #: per row, how far the page's vector may still move and keep its IVF list (< 0: unknown)
        self._slack = np.zeros(0, np.float32)
        self._centroid_norm = 0.0  # the largest IVF centroid norm
        self.lists_kept = 0  # upserts that kept their list without a centroid search
        #: of those, the upserts whose list came from a search of their vector (`search`)
        self.lists_from_search = 0
        #: pages' changes applied to a built index before its takeover (`_catch_up`), and at it
        self.changes_caught_up = 0
        self.changes_at_takeover = 0
        #: the IVF searches' queries since the last upsert, with their nearest lists and
        #: slacks: (ids excluded, queries, lists, slacks) a chunk
        self._searched: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._flat: faiss.IndexIDMap2 | None = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        self._ivf: faiss.IndexIVF | None = None
        #: the IVF lists' centroids as FAISS holds them (the IVF's own quantizer where the
        #: lists hold the vectors; with byte codes it is only their shape)
        self._coarse: faiss.IndexFlatIP | None = None
        #: the same centroids as searches and upserts rank them
        self._ranking: CentroidRanking | None = None
        #: the grid of the IVF lists' byte codes (``codes="8bit"``; None: the stored vectors)
        self._grid: ByteGrid | None = None

    # -- introspection -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rows_of)

    def __contains__(self, page_id: object) -> bool:
        return page_id in self._rows_of

    def contains_many(self, page_ids: np.ndarray) -> np.ndarray:
        """Whether each page is indexed (bool array)."""
        return self._rows_of.contains(_as_ids(page_ids))

    def with_prefixes(self, prefixes: np.ndarray, shift: int) -> np.ndarray:
        """For each id prefix (the bits above the lowest ``shift``), the one indexed page
        whose id has it, or -1 where none or several do (`IdRows.with_prefixes`)."""
        return self._rows_of.with_prefixes(prefixes, shift)

    def __repr__(self) -> str:
        mode = f"ivf nlist={self._ivf.nlist}" if self._ivf is not None else "exact"
        return f"FaissIndex(dim={self.dim}, n={len(self)}, {mode})"

    @property
    def is_ivf(self) -> bool:
        """True once the index switched from exact search to IVF."""
        return self._ivf is not None

    @property
    def lists(self) -> int:
        """The IVF lists searched (0 while the search is exact)."""
        return 0 if self._ivf is None else int(self._ivf.nlist)

    @property
    def probes(self) -> int:
        """The IVF lists a search probes (0 while the search is exact)."""
        return 0 if self._ivf is None else min(self.nprobe, int(self._ivf.nlist))

    @property
    def next_switch(self) -> int | None:
        """The size at which the search next changes: the switch to IVF, or a retrained index
        taking over (None: no change ahead)."""
        if self._retraining is not None:
            return self._retraining.takeover_at
        return self.exact_below if self._ivf is None else None

    def ids(self) -> np.ndarray:
        """Sorted int64 array of the live page ids."""
        return self._rows_of.ids()

    def reconstruct(self, page_id: int) -> np.ndarray | None:
        """The stored vector of a page, or None when the page is not indexed."""
        rows, found = self._rows_of.find(_as_ids(page_id))
        return self._vectors[rows[0]].astype(np.float32) if found[0] else None

    def reconstruct_many(self, page_ids: np.ndarray) -> np.ndarray:
        """Stored vectors of indexed pages, one row per id (KeyError for an unknown id)."""
        ids = _as_ids(page_ids)
        rows, found = self._rows_of.find(ids)
        if not found.all():
            raise KeyError(f"pages not indexed: {ids[~found][:5].tolist()}")
        return self._vectors_at(rows)

    def _vectors_at(self, rows: np.ndarray) -> np.ndarray:
        """The stored vectors at ``rows`` of the table, as float32."""
        if self._vectors.dtype == np.float16:  # a table lookup: numpy's cast is 4x slower
            return gather_half(self._vectors.view(np.uint16), rows)
        return self._vectors[rows]

    def stored(self, vectors: np.ndarray) -> np.ndarray:
        """``vectors`` (n, dim) as this index stores them: float32, rounded to half precision
        when ``storage="float16"``."""
        matrix = _as_matrix(vectors, self.dim)
        if self.storage == "float16":
            return matrix.astype(np.float16).astype(np.float32)
        return matrix

    @property
    def _index(self) -> faiss.Index:
        return self._ivf if self._ivf is not None else self._flat

    # -- updates -------------------------------------------------------------------------

    def upsert(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Insert or replace pages; within one call the last occurrence of an id wins."""
        ids = _as_ids(ids)
        vectors = self.stored(vectors)
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
        pages = len(ids)
        while len(ids):
            limit = self._next_threshold()
            split = len(ids) if limit is None else self._threshold_split(ids, limit)
            self._apply_upsert(ids[:split], vectors[:split])
            if limit is not None and len(self) >= limit:
                self._at_threshold()
            ids, vectors = ids[split:], vectors[split:]
        self._searched.clear()
        self._catch_up(pages)

    def _apply_upsert(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if self._ivf is None:
            self._upsert_flat(ids, vectors)
        else:
            self._upsert_ivf(ids, vectors)
        if self._retraining is not None and len(ids):
            self._retraining.changes.append((ids, vectors))

    def remove(self, ids: np.ndarray) -> None:
        """Remove pages; ids that are not indexed are ignored."""
        ids = _as_ids(ids)
        _, first = np.unique(ids, return_index=True)
        ids = ids[np.sort(first)]
        arr = ids[self.contains_many(ids)]
        if not len(arr):
            return
        if self._ivf is None:
            self._flat.remove_ids(arr)
        else:
            _remove_ids(self._ivf, arr)
        if self._retraining is not None:
            self._retraining.changes.append((arr, None))
        self._free.extend(self._rows_of.remove(arr).tolist())
        self._catch_up(len(arr))

    def _next_threshold(self) -> int | None:
        """The next size at which the index changes: the start of the IVF's training or of
        a retraining, or the takeover of what they built."""
        if self._retraining is not None:
            return self._retraining.takeover_at
        if self._ivf is None:
            return self.exact_below
        return self._retrain_at

    def _at_threshold(self) -> None:
        if self._retraining is not None:
            self._take_over()
        elif self._ivf is None:
            self._start_switch_to_ivf()
        else:
            self._start_retraining()

    def _threshold_split(self, ids: np.ndarray, limit: int) -> int:
        """Length of the prefix of ``ids`` after which the index holds ``limit`` pages."""
        room = limit - len(self)
        _, first = np.unique(ids, return_index=True)
        is_first = np.zeros(len(ids), dtype=bool)
        is_first[first] = True
        new = is_first & ~self.contains_many(ids)
        grown = np.cumsum(new)
        reach = np.flatnonzero(grown >= room)
        return int(reach[0]) + 1 if len(reach) else len(ids)

    def _upsert_flat(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        # Flat removal compacts in order, so "remove the replaced ids, append the chunk
        # deduplicated by last occurrence" equals applying the pages one by one.
        if not len(ids):
            return
        rev_unique, rev_first = np.unique(ids[::-1], return_index=True)
        keep = np.sort(len(ids) - 1 - rev_first)
        ids, vectors = ids[keep], vectors[keep]
        replaced = rev_unique[self.contains_many(rev_unique)]
        if len(replaced):
            self._flat.remove_ids(replaced)
        self._flat.add_with_ids(vectors, ids)
        self._remember(ids, vectors)

    def _upsert_ivf(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        indexed = self.contains_many(ids)
        lists, slack = self._lists_of(ids, vectors, indexed)
        self._upsert_ivf_lists(ids, vectors, indexed, lists)
        self._remember(ids, vectors, slack)

    def _lists_of(
        self, ids: np.ndarray, vectors: np.ndarray, indexed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per upsert, its IVF list (that of the nearest centroid) and its slack.

        A vector's slack is half the margin by which its nearest centroid beats the second,
        over the largest centroid norm: an inner product with a centroid moves by at most the
        distance moved times the centroid's norm, so a vector that has moved less than that
        in all since its list was found still has the same nearest centroid. Such a page
        keeps its list, what is left of the slack carried on; the others are searched, which
        at a million pages (4,096 centroids) is half of what an upsert costs. The lists are
        those a search of every vector gives, whatever the chunking.
        """
        ivf = self._ivf
        assert ivf is not None
        n = len(ids)
        lists = np.full(n, -1, dtype=np.int64)
        slack = np.full(n, -1.0, dtype=np.float32)
        previous = np.full(n, -1, dtype=np.int64)
        last: dict[int, int] = {}
        for row, page in enumerate(ids.tolist()):
            previous[row] = last.get(page, -1)
            last[page] = row
        stored = np.flatnonzero(indexed & (previous < 0))
        if len(stored):
            rows, _ = self._rows_of.find(ids[stored])
            before = self._vectors_at(rows)
            moved = np.linalg.norm(vectors[stored] - before, axis=1)
            if self._vectors.dtype == np.float16:  # the stored vector is itself rounded
                moved += np.linalg.norm(before, axis=1) * 2.0**-11
            left = self._slack[rows] - moved
            keep = left > 0
            stored = stored[keep]
            slack[stored] = left[keep]
            direct_map = ivf.direct_map
            lists[stored] = [faiss.lo_listno(direct_map.get(p)) for p in ids[stored].tolist()]
        todo = np.flatnonzero(lists < 0)  # repeats in the chunk too: few, and done in order
        if len(todo) and self._searched:
            found, left = self._searched_lists(ids[todo], vectors[todo])
            hits = left > 0
            lists[todo[hits]], slack[todo[hits]] = found[hits], left[hits]
            self.lists_from_search += int(hits.sum())
            todo = todo[~hits]
        if len(todo):
            found_sims, found_lists = self._ranked(vectors[todo], min(2, ivf.nlist))
            lists[todo] = found_lists[:, 0]
            slack[todo] = self._slack_of(found_sims)
        for row in np.flatnonzero(previous >= 0).tolist():
            earlier = previous[row]
            left = slack[earlier] - float(np.linalg.norm(vectors[row] - vectors[earlier]))
            if left > 0:
                lists[row], slack[row] = lists[earlier], left
        self.lists_kept += n - len(todo)
        return lists, slack

    def _slack_of(self, sims: np.ndarray) -> np.ndarray:
        """Each vector's slack from its similarities to its nearest centroids, best first
        (see `_lists_of`); infinite with one list: there is nothing to move to."""
        if sims.shape[1] >= 2 and self._centroid_norm > 0:
            return (sims[:, 0] - sims[:, 1]) / (2 * self._centroid_norm) - _MARGIN_ROUNDING
        return np.full(len(sims), np.inf)

    def _searched_lists(
        self, ids: np.ndarray, vectors: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per upsert, the list a search since the last upsert found for its page's query, and
        the slack left after the distance from that query (<= 0: no search of the page, or
        its vector is too far from what was searched)."""
        searched_ids, queries, found_lists, found_slack = (
            np.concatenate(parts) for parts in zip(*self._searched, strict=True)
        )
        at_of = dict(zip(searched_ids.tolist(), range(len(searched_ids)), strict=True))
        at = np.fromiter((at_of.get(page, -1) for page in ids.tolist()), np.int64, len(ids))
        lists = np.full(len(ids), -1, dtype=np.int64)
        left = np.full(len(ids), -1.0, dtype=np.float32)
        hit = np.flatnonzero(at >= 0)
        if len(hit):
            moved = np.linalg.norm(vectors[hit] - queries[at[hit]], axis=1)
            lists[hit] = found_lists[at[hit]]
            left[hit] = found_slack[at[hit]] - moved
        return lists, left

    def _upsert_ivf_lists(
        self,
        ids: np.ndarray,
        vectors: np.ndarray,
        indexed: np.ndarray,
        lists: np.ndarray | None = None,
        into: _Lists | None = None,
    ) -> None:
        """Add pages to the IVF lists (``into``, or the ones searched now), replacing those
        ``indexed`` marks (bool a page: it was indexed before these), each to its list in
        ``lists`` (None: its nearest centroid's).

        The lists end up in the order one-page-at-a-time upserts leave them (so in an order
        that does not depend on how the stream was chunked): IVF removal swaps the list's
        last entry into the hole, an add appends. Removing a page from a list that an add
        before it appended to would move that add, so the chunk is cut into runs where no
        page is removed from a list the run added to before it; each run's replaced pages are
        then removed in one call, in order, and its pages added in one call, which leaves the
        lists as one page at a time would (a removal and an add on different lists commute).
        """
        target = into if into is not None else self._current_lists()
        ivf = target.ivf
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        # Each vector's list, found for the whole chunk at once (one matrix product, not one
        # search a page: most of an add's cost when pages are replaced one by one).
        if lists is None:
            lists = target.ranking.rank(vectors, 1)[1].reshape(-1)
        lists = np.ascontiguousarray(lists, dtype=np.int64)
        codes = _codes(target.grid, vectors)

        def add_run(lo: int, hi: int, removed: list[int]) -> None:
            if removed:
                _remove_ids(ivf, ids[removed])
            if hi > lo:
                _add_coded(ivf, codes[lo:hi], ids[lo:hi], lists[lo:hi])

        direct_map = ivf.direct_map
        list_now: dict[int, int] = {}  # the list a page of the chunk is in once added
        appended: set[int] = set()  # the lists the current run adds to
        removed: list[int] = []  # the positions whose page the current run removes first
        start = 0
        rows = zip(ids.tolist(), indexed.tolist(), lists.tolist(), strict=True)
        for pos, (page, was, into) in enumerate(rows):
            current = list_now.get(page)
            if current is None and was:
                current = faiss.lo_listno(direct_map.get(page))
            if current is not None and current in appended:
                add_run(start, pos, removed)
                start, removed = pos, []
                appended.clear()
            if current is not None:
                removed.append(pos)
            appended.add(into)
            list_now[page] = into
        add_run(start, len(ids), removed)

    def _remember(
        self, ids: np.ndarray, vectors: np.ndarray, slack: np.ndarray | None = None
    ) -> None:
        """Keep the pages' stored vectors for `reconstruct` (an id's last vector wins), and
        their slack (`_lists_of`; None: unknown)."""
        rev_unique, rev_first = np.unique(ids[::-1], return_index=True)
        last = len(ids) - 1 - rev_first
        rows, found = self._rows_of.find(rev_unique)
        new = rev_unique[~found]
        if len(new):  # removed pages' rows first, the last freed first, then fresh ones
            reused = min(len(new), len(self._free))
            new_rows = np.empty(len(new), dtype=np.int64)
            new_rows[:reused] = self._free[::-1][:reused]
            del self._free[len(self._free) - reused :]
            new_rows[reused:] = np.arange(self._used, self._used + len(new) - reused)
            self._used += len(new) - reused
            rows[~found] = new_rows
            self._rows_of.insert(new, new_rows)
        if self._used > len(self._vectors):  # by a quarter: the slack is memory at the peak
            size = max(len(self._vectors) + len(self._vectors) // 4, self._used, 1024)
            grown = np.empty((size, self.dim), dtype=self._vectors.dtype)
            grown[: len(self._vectors)] = self._vectors
            self._vectors = grown
            self._slack = np.concatenate(
                [self._slack, np.full(size - len(self._slack), -1.0, np.float32)]
            )
        self._vectors[rows] = vectors[last]
        self._slack[rows] = -1.0 if slack is None else slack[last]

    @property
    def _centroids(self) -> faiss.IndexFlatIP:
        assert self._coarse is not None
        return self._coarse

    def _ranked(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query's ``k`` nearest centroids' similarities and lists, best first."""
        assert self._ranking is not None
        return self._ranking.rank(queries, k)

    def _use(self, lists: _Lists) -> None:
        """Search and update ``lists`` from now on."""
        self._ivf, self._coarse, self._grid = lists.ivf, lists.centroids, lists.grid
        self._ranking = lists.ranking
        self._new_lists()

    def _new_lists(self) -> None:
        """The IVF lists were built anew: no page's slack is known; the centroids' largest
        norm is read for the slacks to come."""
        assert self._ivf is not None
        self._slack[:] = -1.0
        self._searched.clear()
        assert self._ranking is not None
        self._centroid_norm = self._ranking.largest_norm

    def _current_lists(self) -> _Lists:
        """The IVF lists searched and updated now."""
        assert self._ivf is not None and self._coarse is not None and self._ranking is not None
        return _Lists(self._ivf, self._coarse, self._ranking, self._grid)

    def _start_switch_to_ivf(self) -> None:
        """Train and fill the first IVF index on every vector held now, in the background
        (the exact search goes on meanwhile); it takes over as a retrained one does."""
        flat = self._flat
        assert flat is not None
        n = flat.ntotal
        vectors = flat.index.reconstruct_n(0, n)
        ids = faiss.vector_to_array(flat.id_map).astype(np.int64)
        nlist = self.nlist if self.nlist is not None else default_nlist(n)
        self._train_in_background(nlist, vectors, ids, vectors, self.takeover_growth)

    # -- retraining ----------------------------------------------------------------------

    def _schedule_retraining(self) -> None:
        """Retrain once the index is large enough for more lists than it has
        (`size_for_more_lists`), and not before it holds ``retrain_growth`` times the pages
        it has now."""
        if self.nlist is not None or self.retrain_growth is None:
            return
        grown = math.ceil(self.retrain_growth * max(len(self), 1))
        self._retrain_at = max(grown, size_for_more_lists(max(self.lists, 1)))

    def _start_retraining(self) -> None:
        """Train and fill a new IVF index on the vectors indexed now, in the background, if
        this size calls for more lists than the current index has."""
        size = len(self)
        nlist = default_nlist(size)
        if nlist <= self.lists:
            self._schedule_retraining()
            return
        ids, rows = self._rows_of.items()
        order = np.argsort(rows, kind="stable")  # row order: how the pages arrived
        ids, vectors = ids[order], self._vectors[rows[order]].astype(np.float32)
        sample = min(size, nlist * self.train_points_per_list)
        rng = np.random.default_rng(self.seed + self.retrains + 1)
        picked = np.sort(rng.choice(size, sample, replace=False))
        self._retrain_at = None
        self._train_in_background(
            nlist, vectors[picked], ids, vectors, self.retrain_takeover_growth
        )

    def _train_in_background(
        self,
        nlist: int,
        train: np.ndarray,
        ids: np.ndarray,
        vectors: np.ndarray,
        growth: float,
    ) -> None:
        """Build an IVF index of ``nlist`` lists (trained on ``train``, filled with ``ids``
        and ``vectors``: every page indexed now) in the training thread; it takes over at
        ``growth`` times this size, and at least one page later."""
        size = len(ids)
        self._retraining = _Retraining(
            takeover_at=max(math.ceil(growth * size), size + 1),
            ids=ids,
            built=_background().submit(_build_ivf, self._ivf_params(nlist), train, ids, vectors),
        )

    def _take_over(self) -> None:
        """The retrained index, with the changes made since it was started, replaces the
        current one (waiting for it if it is not ready)."""
        retraining, self._retraining = self._retraining, None
        assert retraining is not None
        first = self._ivf is None  # the switch from the exact search, not a retraining
        built = retraining.built.result()
        while retraining.changes:
            self.changes_at_takeover += self._apply_change(retraining, built)
        self._use(built)
        self._flat = None
        self.retrains += 0 if first else 1
        self._schedule_retraining()

    def _catch_up(self, pages: int) -> None:
        """Once the index in training is built, apply the changes made since it started, a
        share at each update (``pages`` the update's own, and as many again, at least
        `_CATCH_UP_PAGES`), so that few are left for the takeover: applied there all at once,
        22,000 pages' changes stopped a live worker's batch for 0.8 s. The built index is
        not searched before its takeover, and its changes are applied in the order they were
        made whenever that is, so the index it gives is the same."""
        retraining = self._retraining
        if retraining is None or not retraining.changes or not retraining.built.done():
            return
        built = retraining.built.result()
        budget = pages + max(pages, _CATCH_UP_PAGES)
        applied = 0
        while retraining.changes and applied < budget:
            applied += self._apply_change(retraining, built)
        self.changes_caught_up += applied

    def _apply_change(self, retraining: _Retraining, built: _Lists) -> int:
        """Apply the oldest change not yet in ``built`` to it; the pages it changed."""
        ids, vectors = retraining.changes.popleft()
        if retraining.members is None:
            retraining.members = set(retraining.ids.tolist())
        members = retraining.members
        if vectors is None:
            _remove_ids(built.ivf, ids)
            members.difference_update(ids.tolist())
        else:
            indexed = np.fromiter((i in members for i in ids.tolist()), bool, len(ids))
            self._upsert_ivf_lists(ids, vectors, indexed, into=built)
            members.update(ids.tolist())
        return len(ids)

    def _ivf_params(self, nlist: int) -> _IVFParams:
        return _IVFParams(self.dim, nlist, self.storage, self.codes, self.seed)

    # -- search --------------------------------------------------------------------------

    def search(
        self, vectors: np.ndarray, k: int, exclude: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k pages by cosine similarity per query row; see :class:`VectorIndex`."""
        queries = _as_matrix(vectors, self.dim)
        if k < 0:
            raise ValueError("k must be >= 0")
        n = len(queries)
        if exclude is not None and np.size(exclude) != n:
            raise ValueError("exclude needs one id per query")
        if k == 0 or n == 0 or not len(self):
            return np.zeros((n, k), np.float32), np.full((n, k), -1, np.int64)
        extra = 0 if exclude is None else 1
        if self._ivf is None:
            sims, ids = self._index.search(queries, k + extra)
        else:
            sims, ids = self._search_ivf(queries, k + extra, exclude)
        return drop_excluded(sims, ids, k, exclude)

    def _search_ivf(
        self, queries: np.ndarray, k: int, exclude: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """`IndexIVF.search` in its two steps, ranking the centroids and scanning the lists,
        so that the ranking is kept for the excluded pages' upserts to come: a page searched
        with a vector and upserted with one close to it takes its list from the search
        (`_lists_of`) instead of ranking the centroids again."""
        ivf = self._ivf
        assert ivf is not None
        ivf.nprobe = min(self.nprobe, ivf.nlist)
        coarse_sims, coarse_lists = self._ranked(queries, ivf.nprobe)
        if self._grid is None:
            sims, ids = ivf.search_preassigned(queries, k, coarse_lists, coarse_sims)
        else:
            codes = self._grid.encode_queries(queries)
            sims, ids = ivf.search_preassigned(codes, k, coarse_lists, coarse_sims)
            sims = np.where(ids >= 0, self._grid.similarities(queries, codes, sims), sims)
        if exclude is not None:
            self._keep_searched(np.asarray(exclude), queries, coarse_sims, coarse_lists)
        return sims, ids

    def _keep_searched(
        self, ids: np.ndarray, queries: np.ndarray, sims: np.ndarray, lists: np.ndarray
    ) -> None:
        """Keep a search's nearest lists and their slacks (see `_lists_of`) until the next
        upsert, the most recent `SEARCHES_KEPT` queries at most."""
        slack = self._slack_of(sims).astype(np.float32)
        self._searched.append((ids.astype(np.int64), queries.copy(), lists[:, 0].copy(), slack))
        while sum(len(part[0]) for part in self._searched) > SEARCHES_KEPT:
            self._searched.pop(0)


@dataclass(frozen=True)
class _IVFParams:
    dim: int
    nlist: int
    storage: str
    codes: str
    seed: int


@dataclass(frozen=True)
class _Lists:
    """An IVF index, the flat index of its centroids, their ranking (searched for a vector's
    lists) and the grid of its byte codes (None: the lists hold the vectors as stored)."""

    ivf: faiss.IndexIVF
    centroids: faiss.IndexFlatIP
    ranking: CentroidRanking
    grid: ByteGrid | None


def _build_ivf(
    params: _IVFParams, train: np.ndarray, ids: np.ndarray, vectors: np.ndarray
) -> _Lists:
    """IVF lists, ``params.nlist`` centroids trained on ``train``, holding ``vectors`` under
    ``ids``, with a hash-table direct map so pages can be replaced and removed."""
    centroids = faiss.IndexFlatIP(params.dim)
    cp = faiss.ClusteringParameters()
    cp.niter, cp.spherical = 10, True  # what FAISS's IVF trains its lists with
    cp.seed = params.seed
    cp.min_points_per_centroid = 1  # nlist is chosen by the caller; no warnings on stderr
    cp.max_points_per_centroid = max(256, len(train) // params.nlist + 1)  # all of them
    faiss.Clustering(params.dim, params.nlist, cp).train(train, centroids)
    ranking = CentroidRanking(centroids.reconstruct_n(0, params.nlist))
    grid = None
    if params.codes == "8bit":
        # Byte codes scanned as bytes (`online.byte_grid`); searches and upserts rank the
        # centroids in `centroids`, so the IVF's own quantizer only gives the codes' shape.
        grid = ByteGrid.spanning(train)
        ivf = faiss.IndexIVFScalarQuantizer(
            faiss.IndexFlatIP(grid.code_dim),
            grid.code_dim,
            params.nlist,
            faiss.ScalarQuantizer.QT_8bit_direct,
            faiss.METRIC_INNER_PRODUCT,
            False,
        )
    elif params.storage == "float16":
        ivf = faiss.IndexIVFScalarQuantizer(
            centroids,
            params.dim,
            params.nlist,
            faiss.ScalarQuantizer.QT_fp16,
            faiss.METRIC_INNER_PRODUCT,
            False,  # codes are the vectors themselves, not residuals to their centroid
        )
    else:
        ivf = faiss.IndexIVFFlat(centroids, params.dim, params.nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.is_trained = True  # the codes learn nothing (direct, half or full floats)
    ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
    for lo in range(0, len(ids), _ADD_CHUNK):  # each vector to its nearest centroid's list
        chunk = np.ascontiguousarray(vectors[lo : lo + _ADD_CHUNK], dtype=np.float32)
        lists = np.ascontiguousarray(ranking.rank(chunk, 1)[1].reshape(-1))
        chunk_ids = np.ascontiguousarray(ids[lo : lo + _ADD_CHUNK], dtype=np.int64)
        _add_coded(ivf, _codes(grid, chunk), chunk_ids, lists)
    return _Lists(ivf, centroids, ranking, grid)  # wrappers keep their quantizers alive


def _codes(grid: ByteGrid | None, vectors: np.ndarray) -> np.ndarray:
    """What the IVF lists store of ``vectors``: their byte codes on ``grid``, or the vectors
    themselves (None)."""
    return vectors if grid is None else grid.encode(vectors)


def _add_coded(ivf: faiss.IndexIVF, codes: np.ndarray, ids: np.ndarray, lists: np.ndarray) -> None:
    """``codes`` (contiguous float32 rows) added under ``ids`` to the IVF lists ``lists``."""
    ivf.add_core(len(ids), faiss.swig_ptr(codes), faiss.swig_ptr(ids), faiss.swig_ptr(lists))


@dataclass
class _Retraining:
    """A retrained index being built in the background: the size at which it takes over,
    the pages it was started with (``ids``) and the changes made since that are not yet
    applied to it, oldest first (upserts with their vectors, removes with None)."""

    takeover_at: int
    ids: np.ndarray
    built: Future[_Lists]
    changes: deque[tuple[np.ndarray, np.ndarray | None]] = field(default_factory=deque)
    #: the pages in the built index, from the first change applied to it on
    members: set[int] | None = None


#: the fewest pages' changes an update applies to a built index before its takeover
_CATCH_UP_PAGES = 512


def _remove_ids(ivf: faiss.IndexIVF, ids: np.ndarray) -> None:
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    # The hash-table direct map only accepts an IDSelectorArray; it removes the ids one by
    # one in array order, which keeps removal chunking-independent.
    selector = faiss.IDSelectorArray(len(ids), faiss.swig_ptr(ids))
    ivf.remove_ids(selector)


_TRAINER: ThreadPoolExecutor | None = None


def _background() -> ThreadPoolExecutor:
    """The one thread that trains retrained indexes (FAISS releases the GIL meanwhile)."""
    global _TRAINER
    if _TRAINER is None:
        _TRAINER = ThreadPoolExecutor(
            1,
            thread_name_prefix="index-retrain",
            initializer=_start_trainer_thread,
        )
    return _TRAINER


_TRAINER_NICENESS = 19


def _start_trainer_thread() -> None:
    """The trainer thread on one core at the lowest CPU priority: a k-means that takes its
    time only delays a takeover, while one competing with the pipeline's own thread delays
    every event scored meanwhile."""
    faiss.omp_set_num_threads(1)
    if sys.platform.startswith("linux"):  # niceness is per thread only on Linux
        # A sandbox that refuses it leaves the trainer at the usual priority.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _TRAINER_NICENESS)
