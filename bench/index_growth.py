"""The related-page index as it grows: lists trained once on the first pages, or retrained.

`online.index.FaissIndex` switches from exact search to IVF at ``exact_below`` pages (10,000),
training its lists on those pages. This benchmark grows an index to ``--pages`` clustered
192-d vectors (`bench/knn_graph.py`'s data: lognormal cluster sizes, a page's cosine to its
centre 0.6-0.9) in upserts of 1,000, as a crawl's first round does, once with the lists kept
from the first training and once retraining as it grows (the default), then measures on a
sample of pages, against exact search, the related pages the core finds (the index's
candidates re-scored from the stored vectors): recall@30 and the cost per query.

    python bench/index_growth.py                    # 1,000,000 pages
    python bench/index_growth.py --pages 200000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import online  # noqa: F401  (before FAISS loads: online.blas picks its BLAS kernels)

# isort: split
import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from knn_graph import clustered_vectors, exact_neighbours

from online.index import FaissIndex, recall_at_k
from online.neighbour_search import candidates_searched


def grow(x: np.ndarray, retrain: bool) -> tuple[FaissIndex, float]:
    """An index grown to ``len(x)`` pages in upserts of 1,000, and the seconds it took."""
    growth = {} if retrain else {"retrain_growth": None}  # None: lists kept from the first
    index = FaissIndex(dim=x.shape[1], **growth)
    started = time.perf_counter()
    for lo in range(0, len(x), 1000):
        index.upsert(np.arange(lo, min(lo + 1000, len(x))), x[lo : lo + 1000])
    return index, time.perf_counter() - started


def measure(index: FaissIndex, x: np.ndarray, queries: np.ndarray, truth: np.ndarray) -> tuple:
    """Recall@30 and seconds a query of the related pages the core finds: the index's
    candidates (`candidates_searched`) re-scored from the stored vectors, the best 30 kept."""
    started = time.perf_counter()
    _, ids = index.search(x[queries], candidates_searched(30), exclude=queries)
    found = np.maximum(ids, 0)
    stored = index.reconstruct_many(found.reshape(-1)).reshape(*found.shape, -1)
    sims = np.where(ids >= 0, np.einsum("qkd,qd->qk", stored, index.stored(x[queries])), -np.inf)
    best = np.take_along_axis(ids, np.argsort(-sims, axis=1, kind="stable")[:, :30], axis=1)
    per_query = (time.perf_counter() - started) / len(queries)
    return recall_at_k(best, truth), per_query


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=1_000_000)
    ap.add_argument("--clusters", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=1000)
    args = ap.parse_args()
    faiss.omp_set_num_threads(1)
    x = clustered_vectors(args.pages, 192, args.clusters, 1, (0.6, 0.9))
    queries = np.random.default_rng(0).choice(args.pages, args.queries, replace=False)
    truth = exact_neighbours(x, queries, 30)
    print(f"{args.pages:,} pages, {args.clusters} clusters, {args.queries} queries")
    rows = {}
    for retrain in (False, True):
        index, seconds = grow(x, retrain)
        recall, per_query = measure(index, x, queries, truth)
        name = "retrained as it grows" if retrain else "lists from the first 10,000 pages"
        rows[retrain] = (recall, per_query)
        print(
            f"{name:34s}: {index.lists:5d} lists, {index.retrains} retrains, grown in "
            f"{seconds:5.0f} s; recall@30 {recall:.3f}, {per_query * 1e3:.2f} ms a query",
            flush=True,
        )
    (old_recall, old_cost), (new_recall, new_cost) = rows[False], rows[True]
    print(
        f"retraining: recall@30 {new_recall - old_recall:+.3f}, "
        f"search {old_cost / new_cost:.1f} x faster"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
