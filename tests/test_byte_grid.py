"""The IVF lists' byte codes (`online.byte_grid`): FAISS's byte scan ranks by inner product."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from online.byte_grid import LANES, ByteGrid
from online.index import FaissIndex


def unit(n: int, dim: int, seed: int, shift: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)) + shift
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def direct_lists(grid: ByteGrid, codes: np.ndarray) -> faiss.IndexIVF:
    """One IVF list of FAISS's direct 8-bit codes holding ``codes`` under ids 0..n-1."""
    ivf = faiss.IndexIVFScalarQuantizer(
        faiss.IndexFlatIP(grid.code_dim),
        grid.code_dim,
        1,
        faiss.ScalarQuantizer.QT_8bit_direct,
        faiss.METRIC_INNER_PRODUCT,
        False,
    )
    ivf.is_trained = True
    ids = np.arange(len(codes), dtype=np.int64)
    lists = np.zeros(len(codes), dtype=np.int64)
    codes = np.ascontiguousarray(codes, dtype=np.float32)
    ivf.add_core(len(codes), faiss.swig_ptr(codes), faiss.swig_ptr(ids), faiss.swig_ptr(lists))
    return ivf


@pytest.mark.parametrize("dim", [16, 64, 192])
def test_faiss_scans_the_bytes_as_integer_products(dim: int) -> None:
    """What the grid assumes of FAISS: its direct codes' scan sums the products of the
    query's bytes and the codes' bytes, exactly."""
    x, q = unit(300, dim, seed=1), unit(7, dim, seed=2)
    grid = ByteGrid.spanning(x)
    codes, queries = grid.encode(x), grid.encode_queries(q)
    ivf = direct_lists(grid, codes)
    ivf.nprobe = 1
    sums, ids = ivf.search_preassigned(
        queries, 20, np.zeros((len(q), 1), np.int64), np.zeros((len(q), 1), np.float32)
    )
    expected = queries.astype(np.float64) @ codes.astype(np.float64).T
    np.testing.assert_array_equal(sums, np.take_along_axis(expected, ids, axis=1))
    np.testing.assert_array_equal(sums, -np.sort(-expected, axis=1)[:, :20])  # the top 20


@pytest.mark.parametrize("shift", [0.0, 0.3])
def test_the_scan_ranks_codes_as_the_grids_vectors_and_gives_back_their_similarities(
    shift: float,
) -> None:
    """Sums of byte products, turned back by `similarities`, are the inner products of the
    query's bytes with the grid's vectors: each row in the same order as the sums, and within
    the grid's rounding of the exact cosines. Vectors with a common direction (``shift``)
    make the codes' sums large; the balance dimensions still make them rank nothing."""
    dim = 192
    x, q = unit(2000, dim, seed=3, shift=shift), unit(50, dim, seed=4, shift=shift)
    grid = ByteGrid.spanning(x)
    codes, queries = grid.encode(x), grid.encode_queries(q)
    assert grid.balance % LANES == 0 and grid.code_dim % LANES == 0
    # the balance dimensions make every code's bytes add up to the same total
    np.testing.assert_array_equal(codes.sum(axis=1), np.full(len(x), 128.0 * grid.code_dim))
    sums = queries.astype(np.float64) @ codes.astype(np.float64).T
    sims = grid.similarities(q, queries, sums)
    signed_q = (queries[:, :dim] - 128.0) * np.abs(q).max(axis=1, keepdims=True) / 127
    on_grid = signed_q @ ((codes[:, :dim] - 128.0) * grid.step).T
    np.testing.assert_allclose(sims, on_grid, atol=1e-5)
    assert np.abs(sims - q @ x.T).max() < 0.02
    for row_sums, row_sims in zip(sums, sims, strict=True):
        order = np.argsort(-row_sums, kind="stable")
        assert (np.diff(row_sims[order]) <= 1e-6).all()  # same order


def test_values_past_the_grid_are_clamped_not_wrapped() -> None:
    grid = ByteGrid.spanning(unit(100, 32, seed=5))
    far = np.full((2, 32), 50.0, dtype=np.float32)
    far[1] *= -1
    codes = grid.encode(far)
    assert codes.min() >= 0 and codes.max() <= 255
    assert (codes[0, :32] == 255).all() and (codes[1, :32] == 0).all()
    assert (grid.encode_queries(far)[:, :32] == [[255.0], [1.0]]).all()


def test_a_zero_query_is_similar_to_nothing() -> None:
    x = unit(50, 16, seed=6)
    grid = ByteGrid.spanning(x)
    zero = np.zeros((1, 16), dtype=np.float32)
    queries = grid.encode_queries(zero)
    assert (queries == 128.0).all()
    sims = grid.similarities(zero, queries, queries.astype(np.float64) @ grid.encode(x).T)
    np.testing.assert_array_equal(sims, np.zeros((1, 50), np.float32))


def test_the_index_with_byte_codes_finds_what_exact_search_finds() -> None:
    """`FaissIndex` in IVF mode with byte codes (the default) against exact search, and its
    similarities within the grid's rounding of the exact ones."""
    x = unit(3000, 64, seed=7, shift=0.1)
    index = FaissIndex(dim=64, exact_below=500, nlist=16, nprobe=16, retrain_growth=None)
    index.upsert(np.arange(len(x)), x)
    assert index.is_ivf
    q = x[:40]
    sims, ids = index.search(q, 10, exclude=np.arange(40))
    stored = index.stored(x)
    exact = stored[:40] @ stored.T
    exact[np.arange(40), np.arange(40)] = -np.inf
    truth = np.argsort(-exact, axis=1)[:, :10]
    found = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth, strict=True)])
    assert found > 0.9  # every list probed: only the codes' rounding reorders near ties
    assert np.abs(sims - np.take_along_axis(exact, ids, axis=1)).max() < 0.02
