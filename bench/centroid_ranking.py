"""The IVF centroids' ranking: FAISS's flat inner-product search against `CentroidRanking`.

Ranks ``--queries`` random unit queries in chunks of 128 against 1,024 and 4,096 random unit
centroids of ``--dim`` dimensions (the lists of 100,000 and of 1,000,000 pages), for the 16
lists a search probes and the 2 an upsert's list and slack need, one thread, each way's best
of ``--repeats``. Prints microseconds a query both ways, the ratio, and how many of the
rankings came out the same (they should all).

    python bench/centroid_ranking.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import online  # noqa: F401  (before FAISS loads: online.blas picks its BLAS kernels)

# isort: split
import faiss
import numpy as np
from threadpoolctl import threadpool_limits

from online.centroid_ranking import CentroidRanking
from online.index import BLAS_FROM_QUERIES

CHUNK = 128


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def best_seconds(
    rank: Callable[[np.ndarray, int], object], k: int, queries: np.ndarray, repeats: int
) -> float:
    """The best of ``repeats`` passes of ``rank(chunk, k)`` over ``queries`` in chunks, in
    seconds a query."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for at in range(0, len(queries), CHUNK):
            rank(queries[at : at + CHUNK], k)
        best = min(best, time.perf_counter() - started)
    return best / len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=192)
    parser.add_argument("--queries", type=int, default=2_560)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    faiss.omp_set_num_threads(1)
    faiss.cvar.distance_compute_blas_threshold = BLAS_FROM_QUERIES  # as `FaissIndex` sets it
    rng = np.random.default_rng(0)
    with threadpool_limits(1):
        for lists in (1_024, 4_096):
            centroids = unit_rows(rng, lists, args.dim)
            queries = unit_rows(rng, args.queries, args.dim)
            flat = faiss.IndexFlatIP(args.dim)
            flat.add(centroids)
            ranking = CentroidRanking(centroids)
            for k in (16, 2):
                by_faiss = best_seconds(flat.search, k, queries, args.repeats)
                ours = best_seconds(ranking.rank, k, queries, args.repeats)
                same = np.mean(flat.search(queries, k)[1] == ranking.rank(queries, k)[1])
                print(
                    f"{lists:>5,} centroids, top {k:>2}: FAISS {by_faiss * 1e6:6.1f} µs a query, "
                    f"CentroidRanking {ours * 1e6:6.1f} µs ({by_faiss / ours:.2f} x); "
                    f"the same lists for {same:.2%} of the rankings"
                )


if __name__ == "__main__":
    main()
