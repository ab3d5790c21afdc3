"""The offline k-NN graph of a whole crawl: every page's k nearest pages by cosine similarity,
for a batch bootstrap of related pages and for measuring the online index against.

The online, incremental index the pipeline uses is `online.index.FaissIndex`; this builder
takes all vectors at once (exact for small crawls, an IVF join for large ones).

>>> rng = np.random.default_rng(0)
>>> x = rng.standard_normal((50, 8)).astype(np.float32)
>>> x /= np.linalg.norm(x, axis=1, keepdims=True)
>>> sims, idx = knn_graph(x, k=5)
>>> idx.shape, bool((idx != np.arange(50)[:, None]).all())
((50, 5), True)
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import NamedTuple

import faiss
import numpy as np

from online.index import default_nlist, drop_excluded

__all__ = ["DEFAULT_GRAPH_NPROBE", "knn_graph"]

#: Lists probed per page by the IVF graph. With nlist ~ 4 sqrt(n) it measured recall@30
#: 0.99 (2,000 clusters) and 0.98 (200 noisier clusters) on 384k pages (bench/knn_graph.py);
#: 12 probes already give 0.99 on the first but only 0.88 on the second.
DEFAULT_GRAPH_NPROBE = 24


def knn_graph(
    vectors: np.ndarray,
    k: int = 30,
    *,
    method: str = "auto",
    progress: Callable[[int, int], None] | None = None,
    seed: int = 0,
    nlist: int | None = None,
    nprobe: int | None = None,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The related-page graph of all pages: each row's k nearest other rows.

    Returns ``(sims (n, k) float32, neighbour row indices (n, k) int64)``, best first,
    the row itself excluded, missing slots -1 with similarity 0.

    ``method="exact"`` is brute force (FAISS BLAS kernels); ``"ivf"`` is an IVF
    self-join, see :func:`_ivf_knn_graph`; ``"auto"`` picks exact below 20,000 rows.
    ``progress(done, total)`` is called as the work advances; ``threads`` defaults to
    FAISS's OpenMP thread count.

    >>> x = np.eye(4, dtype=np.float32)[[0, 0, 1, 2]]
    >>> knn_graph(x, k=2, method="exact")[1][:2].tolist()
    [[1, 2], [0, 2]]
    """
    x = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    if x.ndim != 2:
        raise ValueError("vectors must be a (n, dim) matrix")
    if k < 1:
        raise ValueError("k must be >= 1")
    if method == "auto":
        method = "exact" if len(x) < 20_000 else "ivf"
    if method == "exact":
        return _exact_knn_graph(x, k, progress)
    if method == "ivf":
        threads = max(1, int(threads or faiss.omp_get_max_threads()))
        return _ivf_knn_graph(
            x, k, progress=progress, seed=seed, nlist=nlist, nprobe=nprobe, threads=threads
        )
    raise ValueError(f"unknown method {method!r}; use 'auto', 'exact' or 'ivf'")


def _exact_knn_graph(
    x: np.ndarray, k: int, progress: Callable[[int, int], None] | None
) -> tuple[np.ndarray, np.ndarray]:
    n = len(x)
    out_s = np.zeros((n, k), np.float32)
    out_i = np.full((n, k), -1, np.int64)
    block = 4096
    for start in range(0, n, block):
        stop = min(n, start + block)
        sims, idx = faiss.knn(x[start:stop], x, min(k + 1, n), metric=faiss.METRIC_INNER_PRODUCT)
        s, i = drop_excluded(sims, idx, k, np.arange(start, stop))
        out_s[start:stop, : s.shape[1]] = s
        out_i[start:stop, : i.shape[1]] = i
        if progress is not None:
            progress(stop, n)
    return out_s, out_i


def _ivf_knn_graph(
    x: np.ndarray,
    k: int,
    *,
    progress: Callable[[int, int], None] | None,
    seed: int,
    nlist: int | None,
    nprobe: int | None,
    threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Approximate k-NN graph by an IVF self-join with BLAS blocks and threshold pruning.

    Searching every page against an IVF index scans each probed list once per query,
    which is memory-bound. Here each list is scanned once for all the pages probing it,
    as one matrix product. Pass A joins every list with itself (a page's own list holds
    most of its neighbours), which gives each page a k-th-best similarity; pass B joins
    each list with the pages probing it at ranks 1..nprobe-1 and keeps only pairs above
    that threshold in a small per-page buffer, compacted (threshold raised) when full.

    Lists are joined by ``threads`` workers, each with single-threaded BLAS: many small
    products parallelise better that way than through BLAS threads, which also stall
    badly when the machine is shared. Results are merged in list order, so the graph does
    not depend on thread timing (up to exact ties).

    On the benchmark's pages this join is faster than building and searching a FAISS HNSW
    graph, and than searching every page through an IndexIVFFlat, at a higher recall.
    """
    n, dim = x.shape
    nlist = max(1, min(int(nlist or default_nlist(n)), n))
    nprobe = max(1, min(int(nprobe or DEFAULT_GRAPH_NPROBE), nlist))
    total = 2 * nlist + 2
    done = 0

    def tick(step: int = 1) -> None:
        nonlocal done
        done += step
        if progress is not None:
            progress(done, total)

    km = faiss.Kmeans(
        dim, nlist, niter=10, seed=seed, spherical=True,
        max_points_per_centroid=64, min_points_per_centroid=1,
    )  # fmt: skip
    km.train(x)
    tick()
    quantizer = faiss.IndexFlatIP(dim)
    quantizer.add(km.centroids)
    _, probes = quantizer.search(x, nprobe)
    tick()

    own = probes[:, 0]
    order = np.argsort(own, kind="stable")
    bounds = np.searchsorted(own[order], np.arange(nlist + 1))
    xs = x[order]
    other = probes[:, 1:].ravel()
    queries = np.repeat(np.arange(n), nprobe - 1)
    by_list = np.argsort(other, kind="stable")
    other, queries = other[by_list], queries[by_list]
    qbounds = np.searchsorted(other, np.arange(nlist + 1))
    del probes, by_list, other
    join = _JoinBuffer(n, k)

    def self_join(j: int) -> _Candidates | None:
        lo, hi = bounds[j], bounds[j + 1]
        if hi - lo < 2:
            return None
        sims = xs[lo:hi] @ xs[lo:hi].T
        np.fill_diagonal(sims, -np.inf)
        return join.select(order[lo:hi], sims, order[lo:hi])

    def cross_join(j: int) -> _Candidates | None:
        lo, hi = bounds[j], bounds[j + 1]
        pages = queries[qbounds[j] : qbounds[j + 1]]
        if hi == lo or not len(pages):
            return None
        return join.select(pages, x[pages] @ xs[lo:hi].T, order[lo:hi])

    with _one_blas_thread(), ThreadPoolExecutor(threads) as pool:
        for found in pool.map(self_join, range(nlist)):  # pass A
            join.append(found)
            tick()
        join.set_thresholds()
        for found in pool.map(cross_join, range(nlist)):  # pass B
            join.append(found)
            tick()
    return join.result()


def _one_blas_thread() -> AbstractContextManager[object]:
    """Limit numpy's BLAS to one thread while the join workers run (restored on exit)."""
    try:  # a scikit-learn dependency; without it BLAS keeps its own threads
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        return nullcontext()
    return threadpool_limits(1, user_api="blas")


class _Candidates(NamedTuple):
    """Neighbour candidates of one block: ``count[i]`` of them for page ``pages[i]``."""

    pages: np.ndarray
    count: np.ndarray
    page: np.ndarray  # per candidate: its page, its rank among that page's candidates,
    rank: np.ndarray  # its similarity and the neighbour's row
    sim: np.ndarray
    neighbour: np.ndarray


class _JoinBuffer:
    """Per-page candidate buffer of the IVF self-join (capacity 3k, compacted to k).

    :meth:`select` only reads the thresholds, so workers may run it concurrently (a
    stale, lower threshold only lets more candidates through); :meth:`append` is called
    from one thread.
    """

    def __init__(self, n: int, k: int) -> None:
        self.k = k
        self.cap = 3 * k
        self.sims = np.full((n, self.cap), -np.inf, np.float32)
        self.ids = np.full((n, self.cap), -1, np.int64)
        self.fill = np.zeros(n, np.int64)
        self.threshold = np.full(n, -np.inf, np.float32)

    def set_thresholds(self) -> None:
        """k-th best similarity per page so far (-inf while fewer than k candidates)."""
        self.threshold = self.sims[:, : self.k].min(axis=1)

    def select(self, rows: np.ndarray, sims: np.ndarray, col_ids: np.ndarray) -> _Candidates | None:
        """Candidates of pages ``rows[r]`` among ``sims[r, c]`` (neighbour ``col_ids[c]``)."""
        k = self.k
        mask = sims > self.threshold[rows, None]
        count = np.count_nonzero(mask, axis=1)
        active = np.flatnonzero(count)
        if not len(active):
            return None
        count = np.minimum(count[active], k)  # only a block's top k can matter
        few = count < k
        parts = []
        if few.any():  # fewer than k candidates: take them all
            sub = active[few]
            r, c = np.nonzero(mask[sub])
            n_few = count[few]
            rank = np.arange(len(r)) - np.repeat(np.cumsum(n_few) - n_few, n_few)
            parts.append((rows[sub][r], rank, sims[sub[r], c], col_ids[c]))
        if not few.all():  # k or more: the block's top k
            sub = active[~few]
            block = sims[sub]
            c = np.argpartition(block, block.shape[1] - k, axis=1)[:, -k:]
            parts.append(
                (
                    np.repeat(rows[sub], k),
                    np.tile(np.arange(k), len(sub)),
                    np.take_along_axis(block, c, axis=1).ravel(),
                    col_ids[c].ravel(),
                )
            )
        page, rank, sim, neighbour = (np.concatenate(p) for p in zip(*parts, strict=True))
        return _Candidates(rows[active], count, page, rank, sim, neighbour)

    def append(self, found: _Candidates | None) -> None:
        if found is None:
            return
        full = self.fill[found.pages] + found.count > self.cap
        if full.any():
            self._compact(found.pages[full])
        pos = self.fill[found.page] + found.rank
        self.sims[found.page, pos] = found.sim
        self.ids[found.page, pos] = found.neighbour
        self.fill[found.pages] += found.count

    def _compact(self, pages: np.ndarray) -> None:
        k = self.k
        sims, ids = self.sims[pages], self.ids[pages]
        top = np.argpartition(sims, self.cap - k, axis=1)[:, -k:]
        best_s = np.take_along_axis(sims, top, axis=1)
        best_i = np.take_along_axis(ids, top, axis=1)
        self.sims[pages] = -np.inf
        self.ids[pages] = -1
        self.sims[pages, :k] = best_s
        self.ids[pages, :k] = best_i
        self.fill[pages] = k
        self.threshold[pages] = np.maximum(self.threshold[pages], best_s.min(axis=1))

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        n, k = len(self.fill), self.k
        out_s = np.empty((n, k), np.float32)
        out_i = np.empty((n, k), np.int64)
        for start in range(0, n, 65_536):
            sims = self.sims[start : start + 65_536]
            ids = self.ids[start : start + 65_536]
            top = np.argpartition(sims, self.cap - k, axis=1)[:, -k:]
            top_s = np.take_along_axis(sims, top, axis=1)
            rank = np.argsort(-top_s, axis=1, kind="stable")
            top = np.take_along_axis(top, rank, axis=1)
            out_s[start : start + 65_536] = np.take_along_axis(sims, top, axis=1)
            out_i[start : start + 65_536] = np.take_along_axis(ids, top, axis=1)
        missing = out_i < 0
        out_s[missing] = 0.0
        return out_s, out_i
