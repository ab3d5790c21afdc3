"""The IVF lists' byte codes: FAISS's uniform 8-bit codes against the byte grid scanned as bytes.

`online.index.FaissIndex` keeps one byte a dimension in its IVF lists. FAISS's uniform 8-bit
quantizer turns each byte back into a float as a search scans it; `online.byte_grid` puts
vectors and queries on bytes that FAISS's direct 8-bit kernels multiply as integers, with
balance dimensions that keep the ranking that of the grid's vectors. This benchmark fills the
same lists (the same centroids, each page in its nearest centroid's list) both ways with
``--pages`` clustered 192-d unit vectors (`bench/knn_graph.py`'s data), then searches a sample
of pages in chunks of 128, ``--nprobe`` lists each, one thread, as the pipeline does, and
prints per query the time to rank the centroids and scan the lists, and the recall@30 of the
related pages the core finds from the candidates (re-scored from the vectors, the best 30
kept) against exact search.

    python bench/ivf_codes.py                    # 100,000 pages
    python bench/ivf_codes.py --pages 1000000
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import online  # noqa: F401  (before FAISS loads: online.blas picks its BLAS kernels)

# isort: split
import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from knn_graph import clustered_vectors, exact_neighbours

from online.byte_grid import ByteGrid
from online.index import default_nlist, recall_at_k
from online.neighbour_search import candidates_searched

CHUNK = 128


def uniform_lists(centroids: faiss.IndexFlatIP, train: np.ndarray) -> faiss.IndexIVF:
    """Empty lists of FAISS's uniform 8-bit codes over the trained range widened by a fifth."""
    dim, nlist = centroids.d, centroids.ntotal
    ivf = faiss.IndexIVFScalarQuantizer(
        centroids,
        dim,
        nlist,
        faiss.ScalarQuantizer.QT_8bit_uniform,
        faiss.METRIC_INNER_PRODUCT,
        False,
    )
    ivf.sq.rangestat_arg = 0.2
    ivf.sq.train(train)
    ivf.is_trained = True
    return ivf


def grid_lists(grid: ByteGrid, nlist: int) -> faiss.IndexIVF:
    """Empty lists of direct 8-bit codes, as wide as the grid's codes."""
    ivf = faiss.IndexIVFScalarQuantizer(
        faiss.IndexFlatIP(grid.code_dim),
        grid.code_dim,
        nlist,
        faiss.ScalarQuantizer.QT_8bit_direct,
        faiss.METRIC_INNER_PRODUCT,
        False,
    )
    ivf.is_trained = True
    return ivf


def fill(ivf: faiss.IndexIVF, codes: np.ndarray, lists: np.ndarray) -> None:
    ids = np.arange(len(codes), dtype=np.int64)
    codes = np.ascontiguousarray(codes, dtype=np.float32)
    ivf.add_core(len(codes), faiss.swig_ptr(codes), faiss.swig_ptr(ids), faiss.swig_ptr(lists))


def search_all(
    centroids: faiss.IndexFlatIP,
    ivf: faiss.IndexIVF,
    queries: np.ndarray,
    prepare: Callable[[np.ndarray], np.ndarray],
    nprobe: int,
    k: int,
) -> tuple[np.ndarray, float]:
    """The candidates of every query and the seconds a query, best of three passes."""
    ivf.nprobe = nprobe
    best, found = float("inf"), np.empty((0, k), np.int64)
    for _ in range(3):
        parts = []
        started = time.perf_counter()
        for lo in range(0, len(queries), CHUNK):
            chunk = queries[lo : lo + CHUNK]
            sims, lists = centroids.search(chunk, nprobe)
            parts.append(ivf.search_preassigned(prepare(chunk), k, lists, sims)[1])
        best = min(best, time.perf_counter() - started)
        found = np.concatenate(parts)
    return found, best / len(queries)


def rank_only(centroids: faiss.IndexFlatIP, queries: np.ndarray, nprobe: int) -> float:
    """Seconds a query to rank the centroids alone, best of three passes."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for lo in range(0, len(queries), CHUNK):
            centroids.search(queries[lo : lo + CHUNK], nprobe)
        best = min(best, time.perf_counter() - started)
    return best / len(queries)


def related(x: np.ndarray, rows: np.ndarray, found: np.ndarray, k: int) -> np.ndarray:
    """The best ``k`` of each row's candidates (without itself) by their exact similarity."""
    ok = (found >= 0) & (found != rows[:, None])
    sims = np.where(ok, np.einsum("qkd,qd->qk", x[np.maximum(found, 0)], x[rows]), -np.inf)
    return np.take_along_axis(found, np.argsort(-sims, axis=1, kind="stable")[:, :k], axis=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--clusters", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=2560)
    ap.add_argument("--nprobe", type=int, default=16)
    args = ap.parse_args()
    faiss.omp_set_num_threads(1)
    faiss.cvar.distance_compute_blas_threshold = 20  # as online.index sets it
    x = clustered_vectors(args.pages, 192, args.clusters, 1, (0.6, 0.9))
    x = x.astype(np.float16).astype(np.float32)  # as the index stores them
    rng = np.random.default_rng(0)
    rows = rng.choice(args.pages, min(args.queries, args.pages), replace=False)
    truth = exact_neighbours(x, rows, 30)
    nlist = default_nlist(args.pages)
    train = x[rng.choice(args.pages, min(args.pages, 32 * nlist), replace=False)]
    centroids = faiss.IndexFlatIP(192)
    cp = faiss.ClusteringParameters()
    cp.niter, cp.spherical, cp.min_points_per_centroid = 10, True, 1
    cp.max_points_per_centroid = len(train)
    faiss.Clustering(192, nlist, cp).train(train, centroids)
    lists = centroids.search(x, 1)[1].reshape(-1).astype(np.int64)

    grid = ByteGrid.spanning(train)
    uniform, direct = uniform_lists(centroids, train), grid_lists(grid, nlist)
    fill(uniform, x, lists)
    fill(direct, grid.encode(x), lists)
    k = candidates_searched(30)
    print(
        f"{args.pages:,} pages, {nlist} lists, {args.nprobe} probed, {len(rows)} queries in "
        f"chunks of {CHUNK}, {k} candidates each; byte grid: {grid.code_dim} bytes a code "
        f"({grid.balance} balance)"
    )
    results = {}
    for name, ivf, prepare in (
        ("FAISS uniform 8-bit codes", uniform, lambda q: q),
        ("byte grid, direct codes", direct, grid.encode_queries),
    ):
        found, per_query = search_all(centroids, ivf, x[rows], prepare, args.nprobe, k)
        recall = recall_at_k(related(x, rows, found, 30), truth)
        results[name] = per_query
        print(f"{name:28s}: {per_query * 1e6:7.1f} us a query, recall@30 {recall:.4f}")
    ranking = rank_only(centroids, x[rows], args.nprobe)
    old, new = results.values()
    print(
        f"ranking the centroids alone: {ranking * 1e6:.1f} us a query; "
        f"the scan {(old - ranking) / max(new - ranking, 1e-9):.2f} x as fast with the byte grid"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
