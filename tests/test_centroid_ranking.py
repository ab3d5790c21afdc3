"""The centroid ranking against FAISS's flat inner-product search, which it replaces."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from online.centroid_ranking import RANK_CHUNK, CentroidRanking


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.parametrize("count, k", [(1, 1), (7, 2), (1024, 16), (4096, 16), (300, 2)])
def test_ranks_as_faiss_flat_search_does(count: int, k: int) -> None:
    """The same centroids in the same order as `IndexFlatIP.search`, similarities equal up
    to float32 rounding, over more queries than one chunk and a chunk's remainder."""
    rng = np.random.default_rng(count)
    centroids, queries = unit_rows(rng, count, 48), unit_rows(rng, 3 * RANK_CHUNK + 5, 48)
    flat = faiss.IndexFlatIP(48)
    flat.add(centroids)
    want_sims, want_lists = flat.search(queries, min(k, count))
    sims, lists = CentroidRanking(centroids).rank(queries, min(k, count))
    assert np.array_equal(lists, want_lists)
    np.testing.assert_allclose(sims, want_sims, atol=1e-5)
    assert np.all(np.diff(sims, axis=1) <= 0)


def test_more_lists_asked_than_centroids_are_padded() -> None:
    ranking = CentroidRanking(np.eye(3, dtype=np.float32))
    sims, lists = ranking.rank(np.array([[0.0, 0.0, 1.0]], dtype=np.float32), 5)
    assert lists.tolist() == [[2, 0, 1, -1, -1]]
    assert sims[0, :3].tolist() == [1.0, 0.0, 0.0] and np.isneginf(sims[0, 3:]).all()


def test_largest_norm_and_count() -> None:
    ranking = CentroidRanking(np.array([[3.0, 4.0], [0.0, 1.0]], dtype=np.float32))
    assert ranking.largest_norm == 5.0 and len(ranking) == 2


@pytest.mark.parametrize("bad", [np.zeros((0, 4)), np.zeros(4)])
def test_refuses_what_is_not_a_matrix_of_centroids(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="centroids"):
        CentroidRanking(bad)
