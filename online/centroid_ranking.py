"""The IVF lists' centroids ranked for a query: the first step of every IVF search and of
finding an upserted page's list.

FAISS's flat inner-product search (`faiss.IndexFlatIP.search`) makes this ranking as one
matrix product and a heap selection per query, and at 1,024 to 4,096 centroids its
selection cost about as much as the product. `CentroidRanking` makes the same product
(numpy's BLAS) and selects each row's best with `online.kernels.top_k_rows`, one pass that
past the first few centroids costs one comparison a centroid. The result is FAISS's: the
same centroids in the same order, similarities equal up to float32 rounding (each of the two
sums the products in its own order; neither is the same to the last bit from one chunk of
queries to another).
"""

from __future__ import annotations

import numpy as np

from online.kernels import top_k_rows

#: Queries ranked a matrix product: their scores (1 MB at 4,096 centroids) are still in the
#: core's cache when the selection reads them.
RANK_CHUNK = 64


class CentroidRanking:
    """Ranks ``centroids`` (rows) by inner product with queries.

    >>> import numpy as np
    >>> ranking = CentroidRanking(np.array([[1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32))
    >>> sims, lists = ranking.rank(np.array([[0.0, 1.0], [1.0, 0.0]], dtype=np.float32), 2)
    >>> lists.tolist(), sims.astype(float).round(2).tolist()
    ([[1, 2], [0, 2]], [[1.0, 0.8], [1.0, 0.6]])
    >>> ranking.largest_norm
    1.0
    """

    def __init__(self, centroids: np.ndarray) -> None:
        centroids = np.asarray(centroids, dtype=np.float32)
        if centroids.ndim != 2 or not len(centroids):
            raise ValueError("centroids must be a non-empty (count, dim) matrix")
        #: the centroids as columns: the product's right-hand side as BLAS reads it fastest
        self.by_column = np.ascontiguousarray(centroids.T)
        #: the largest centroid norm, which bounds how far a move changes a similarity
        self.largest_norm = float(np.linalg.norm(centroids, axis=1).max())

    def __len__(self) -> int:
        return int(self.by_column.shape[1])

    def rank(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per query row, its ``k`` most similar centroids' similarities and numbers, best
        first (ties to the lower number); past the centroids' count, ``-inf`` and ``-1``."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        n = len(queries)
        if n <= RANK_CHUNK:
            return top_k_rows(queries @ self.by_column, k)
        sims = np.empty((n, k), dtype=np.float32)
        lists = np.empty((n, k), dtype=np.int64)
        for lo in range(0, n, RANK_CHUNK):
            hi = min(n, lo + RANK_CHUNK)
            sims[lo:hi], lists[lo:hi] = top_k_rows(queries[lo:hi] @ self.by_column, k)
        return sims, lists
