from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Callable

import faiss
import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from batch.knn_graph import knn_graph
from online.index import (
    FaissIndex,
    VectorIndex,
    _background,
    default_nlist,
    exact_search,
    neighbour_weights,
    recall_at_k,
    size_for_more_lists,
)

DIM = 8
EXACT_BELOW = 12
NLIST = 3


def unit(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def clustered(n: int, dim: int = 16, clusters: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    x = centres[rng.integers(0, clusters, n)] + 0.35 * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def small_index(**kw: int | str) -> FaissIndex:
    # One thread: OpenMP start-up costs more than these tiny searches, most on a busy box.
    args = {"exact_below": EXACT_BELOW, "nlist": NLIST, "nprobe": NLIST, "threads": 1, **kw}
    return FaissIndex(dim=DIM, **args)


#: how far an IVF search's similarity may be from the stored vectors' with 8-bit codes: a
#: code is within half a step (1/255 of the trained range) of each component, which bounds
#: the error near 0.016 in these 8 dimensions, unless a later vector reaches past the range
#: the lists were trained on (a dozen vectors here) and is clamped
CODES_TOLERANCE = 0.05


def check_against_model(
    index: FaissIndex, model: dict[int, np.ndarray], seed: int, tolerance: float = 1e-5
) -> None:
    """Index state equals the dict model; exhaustive search equals brute force (ties allowed)
    within ``tolerance`` of the similarities (exact while the index is; approximate codes
    rank by approximate similarities)."""
    keys = np.array(sorted(model), dtype=np.int64)
    assert len(index) == len(model)
    assert np.array_equal(index.ids(), keys)
    for page, vec in model.items():
        assert page in index
        assert np.array_equal(index.reconstruct(page), vec)
    queries = unit(5, seed=seed + 1000)
    if len(keys):  # queries that are stored pages, excluding themselves
        queries = np.vstack([queries, np.stack([model[int(i)] for i in keys[:3]])])
    exclude = np.concatenate([np.full(5, -1), keys[:3]])
    k = 6
    sims, ids = index.search(queries, k, exclude=exclude)
    assert sims.shape == ids.shape == (len(queries), k)
    assert sims.dtype == np.float32 and ids.dtype == np.int64
    matrix = np.stack([model[int(i)] for i in keys]) if len(keys) else np.zeros((0, DIM))
    ref_s, ref_i = exact_search(matrix, keys, queries, k, exclude)
    np.testing.assert_allclose(sims, ref_s, atol=2 * tolerance)
    assert np.array_equal(ids >= 0, ref_i >= 0)
    for row, excl in zip(ids, exclude, strict=True):
        found = row[row >= 0]
        assert len(set(found.tolist())) == len(found)  # no duplicates
        assert excl not in found.tolist()
        assert all(int(i) in model for i in found)  # never a removed id
    for row_s, row, q in zip(sims, ids, queries, strict=True):
        for s, i in zip(row_s, row, strict=True):
            if i >= 0:
                assert abs(float(model[int(i)] @ q) - float(s)) < tolerance
            else:
                assert s == 0.0


# --------------------------------------------------------------------------------------
# FaissIndex


def test_is_a_vector_index() -> None:
    assert isinstance(FaissIndex(dim=4), VectorIndex)


def test_empty_index_and_padding() -> None:
    index = small_index()
    sims, ids = index.search(unit(2), 3)
    assert (ids == -1).all() and (sims == 0).all() and sims.shape == (2, 3)
    index.upsert(np.array([5, 6]), unit(2))
    sims, ids = index.search(unit(1, seed=3), 4, exclude=np.array([5]))
    assert ids.tolist() == [[6, -1, -1, -1]] and sims[0, 1:].tolist() == [0, 0, 0]
    assert index.search(unit(1), 0)[1].shape == (1, 0)
    assert index.reconstruct(99) is None and 99 not in index and "x" not in index


def test_bad_input_rejected() -> None:
    index = small_index()
    with pytest.raises(ValueError):
        index.upsert(np.array([-1]), unit(1))
    with pytest.raises(ValueError):
        index.upsert(np.array([1, 2]), unit(1))
    with pytest.raises(ValueError):
        index.upsert(np.array([1]), unit(1, dim=DIM + 1))
    with pytest.raises(ValueError):
        index.search(unit(2), 3, exclude=np.array([1]))
    with pytest.raises(ValueError):
        FaissIndex(dim=4, exact_below=10, nlist=11)
    with pytest.raises(ValueError, match="retrain_takeover_growth"):
        FaissIndex(dim=4, retrain_takeover_growth=0.9)


def test_replace_and_last_wins_within_one_call() -> None:
    index = small_index()
    v = index.stored(unit(4))
    index.upsert(np.array([1, 2, 1]), v[:3])
    assert len(index) == 2 and np.array_equal(index.reconstruct(1), v[2])
    index.upsert(np.array([2]), v[3:])
    assert len(index) == 2 and np.array_equal(index.reconstruct(2), v[3])
    index.remove(np.array([2, 2, 77]))
    assert len(index) == 1 and 2 not in index


def test_reconstruct_many_in_both_modes() -> None:
    for exact_below in (100, 5):
        index = small_index(exact_below=exact_below, nlist=2)
        v = index.stored(unit(10))
        index.upsert(np.arange(10) * 7, v)
        assert index.is_ivf == (exact_below == 5)
        assert np.array_equal(index.reconstruct_many(np.array([63, 0, 14])), v[[9, 0, 2]])
        assert index.reconstruct_many(np.array([], dtype=np.int64)).shape == (0, DIM)
        with pytest.raises(KeyError):
            index.reconstruct_many(np.array([1]))


def test_switches_to_ivf_exactly_at_exact_below() -> None:
    index = small_index()
    v = unit(EXACT_BELOW + 5)
    index.upsert(np.arange(EXACT_BELOW - 1), v[: EXACT_BELOW - 1])
    index.upsert(np.array([0]), v[-1:])  # a replacement does not grow the index
    assert not index.is_ivf
    index.upsert(np.arange(EXACT_BELOW - 1, EXACT_BELOW + 3), v[EXACT_BELOW - 1 : EXACT_BELOW + 3])
    assert index.is_ivf and len(index) == EXACT_BELOW + 3
    index.remove(np.arange(5))
    assert index.is_ivf and len(index) == EXACT_BELOW - 2  # never switches back


def test_half_precision_storage_rounds_on_the_way_in() -> None:
    x = unit(30, seed=4)
    half, full = small_index(), small_index(storage="float32")
    assert half.storage == "float16"  # the default
    rounded = half.stored(x)
    assert np.array_equal(rounded, x.astype(np.float16).astype(np.float32))
    assert np.array_equal(half.stored(rounded), rounded)  # idempotent
    assert np.array_equal(full.stored(x), x)
    assert np.abs(rounded @ x.T - x @ x.T).max() < 2e-3  # cosines barely move
    for index in (half, full):
        index.upsert(np.arange(30), x)  # crosses into IVF
        assert index.is_ivf
        assert np.array_equal(index.reconstruct_many(np.arange(30)), index.stored(x))
    with pytest.raises(ValueError, match="storage"):
        FaissIndex(dim=4, storage="int8")


def test_default_nlist() -> None:
    assert default_nlist(20_000) == 512
    assert default_nlist(10) == 1
    assert default_nlist(200) == 4  # >= 39 training points per list
    assert default_nlist(10**9) == 65_536


def test_ivf_with_small_nprobe_still_valid() -> None:
    index = FaissIndex(dim=16, exact_below=300, nlist=16, nprobe=1)
    x = clustered(600)
    index.upsert(np.arange(600), x)
    index.remove(np.arange(0, 600, 3))
    sims, ids = index.search(x[:50], 10, exclude=np.arange(50))
    assert not np.isin(ids, np.arange(0, 600, 3)).any()
    assert not (ids == np.arange(50)[:, None]).any()
    live = np.setdiff1d(np.arange(600), np.arange(0, 600, 3))
    _, ref = exact_search(x[live], live, x[:50], 10, np.arange(50))
    assert recall_at_k(ids, ref) > 0.5
    assert (np.diff(sims, axis=1) <= 1e-6).all()  # best first


ops = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "upsert", "upsert", "remove"]),
        st.lists(st.integers(0, 40), min_size=0, max_size=14),
        st.integers(0, 2**16),
    ),
    min_size=1,
    max_size=10,
)


STORAGE_AND_CODES = [("float16", "stored"), ("float32", "stored"), ("float16", "8bit")]


@pytest.mark.parametrize(("storage", "codes"), STORAGE_AND_CODES)
@settings(max_examples=150, deadline=None)
@given(ops)
def test_any_sequence_of_updates_matches_a_dict_model(
    storage: str, codes: str, operations: list
) -> None:
    index = small_index(storage=storage, codes=codes)
    tolerance = CODES_TOLERANCE if codes == "8bit" else 1e-5
    model: dict[int, np.ndarray] = {}
    for step, (op, ids, seed) in enumerate(operations):
        arr = np.array(ids, dtype=np.int64)
        if op == "upsert":
            vecs = index.stored(unit(len(ids), seed=seed))
            index.upsert(arr, vecs)
            for i, v in zip(ids, vecs, strict=True):
                model[i] = v
        else:
            index.remove(arr)
            for i in ids:
                model.pop(i, None)
        check_against_model(index, model, seed=step, tolerance=tolerance if index.is_ivf else 1e-5)
    event(f"ended in {'ivf' if index.is_ivf else 'exact'} mode")


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 45), min_size=EXACT_BELOW + 4, max_size=70),
    st.lists(st.integers(1, 20), min_size=1, max_size=8),
    st.lists(st.integers(0, 45), max_size=8),
)
def test_chunking_does_not_change_results(
    items: list[int], chunks: list[int], removed: list[int]
) -> None:
    """Same upserts in the same order -> identical index, across the exact -> IVF switch."""
    vecs = unit(len(items), seed=len(items))
    ids = np.array(items, dtype=np.int64)
    whole, pieces = small_index(nprobe=2), small_index(nprobe=2)
    whole.upsert(ids, vecs)
    start = 0
    for size in [*chunks, len(items)]:
        pieces.upsert(ids[start : start + size], vecs[start : start + size])
        start += size
        if start >= len(items):
            break
    for index in (whole, pieces):
        index.remove(np.array(removed, dtype=np.int64))
        index.upsert(ids[:5], vecs[-5:][: len(ids[:5])])
    assert whole.is_ivf == pieces.is_ivf
    event(f"ended in {'ivf' if whole.is_ivf else 'exact'} mode")
    assert np.array_equal(whole.ids(), pieces.ids())
    for page in whole.ids():
        assert np.array_equal(whole.reconstruct(page), pieces.reconstruct(page))
    queries = unit(6, seed=99)
    a, b = whole.search(queries, 7), pieces.search(queries, 7)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def ivf_lists(index: FaissIndex) -> list[list[int]]:
    """Each IVF list's page ids, in list order."""
    invlists = index._ivf.invlists
    return [
        faiss.rev_swig_ptr(invlists.get_ids(lst), invlists.list_size(lst)).tolist()
        for lst in range(invlists.nlist)
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=40, max_size=120),
    st.lists(st.integers(1, 25), min_size=1, max_size=8),
)
def test_ivf_lists_keep_the_order_of_one_page_at_a_time(
    items: list[int], chunks: list[int]
) -> None:
    """Upserts in chunks (most of them replacing pages, often in a list the chunk has just
    added to) leave each IVF list with the pages, in the order, that one upsert at a time
    leaves: the lists' order decides ties among equal codes, so it must not depend on how
    the stream was cut into batches."""
    ids = np.array(items, dtype=np.int64)
    rng = np.random.default_rng(len(items))
    vecs = unit(len(items), seed=len(items))
    vecs = vecs + 0.2 * rng.standard_normal(vecs.shape).astype(np.float32)  # lists change
    first = unit(31, seed=7)  # every page indexed once, so that most upserts replace one
    one, chunked = small_index(nprobe=2), small_index(nprobe=2)
    for index in (one, chunked):
        index.upsert(np.arange(31, dtype=np.int64), first)
        assert index.is_ivf
    for row in range(len(ids)):
        one.upsert(ids[row : row + 1], vecs[row : row + 1])
    start = 0
    for size in itertools.cycle(chunks):
        chunked.upsert(ids[start : start + size], vecs[start : start + size])
        start += size
        if start >= len(ids):
            break
    assert ivf_lists(chunked) == ivf_lists(one)


@pytest.mark.parametrize(("storage", "codes"), STORAGE_AND_CODES)
def test_exhaustive_ivf_matches_exact_on_clustered_data(storage: str, codes: str) -> None:
    ivf = FaissIndex(dim=16, exact_below=200, nlist=8, nprobe=8, storage=storage, codes=codes)
    x = ivf.stored(clustered(500))
    ivf.upsert(np.arange(500) * 3, x)
    assert ivf.is_ivf
    sims, ids = ivf.search(x[:40], 30, exclude=np.arange(40) * 3)
    ref_s, ref_i = exact_search(x, np.arange(500) * 3, x[:40], 30, np.arange(40) * 3)
    if codes == "stored":
        np.testing.assert_allclose(sims, ref_s, atol=1e-5)
        assert recall_at_k(ids, ref_i) > 0.99
        return
    # 8-bit codes: similarities within the codes' error, and the exact top 30 among a
    # search a few wider, which is what the core re-scores (`online.neighbour_search`)
    np.testing.assert_allclose(sims, ref_s, atol=CODES_TOLERANCE)
    assert recall_at_k(ids, ref_i) > 0.9
    _, wider = ivf.search(x[:40], 38, exclude=np.arange(40) * 3)
    exact = np.einsum("qkd,qd->qk", np.stack([x[row // 3] for row in wider]), x[:40])
    rescored = np.take_along_axis(wider, np.argsort(-exact, axis=1, kind="stable"), axis=1)
    assert recall_at_k(rescored[:, :30], ref_i) > 0.99


# --------------------------------------------------------------------------------------
# k-NN graph, weights, recall


def brute_graph(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return exact_search(x, np.arange(len(x)), x, k, np.arange(len(x)))


def test_knn_graph_exact_equals_brute_force() -> None:
    x = clustered(700)
    sims, idx = knn_graph(x, k=30, method="exact")
    ref_s, ref_i = brute_graph(x, 30)
    np.testing.assert_allclose(sims, ref_s, atol=1e-5)
    assert recall_at_k(idx, ref_i) > 0.999
    assert not (idx == np.arange(len(x))[:, None]).any()
    auto_s, _ = knn_graph(x, k=30)  # small n: auto is exact
    np.testing.assert_allclose(auto_s, sims, atol=1e-6)


def test_knn_graph_with_fewer_rows_than_k_and_duplicates() -> None:
    x = np.eye(4, dtype=np.float32)[[0, 0, 1, 2]]
    for method in ("exact", "ivf"):
        sims, idx = knn_graph(x, k=5, method=method, nlist=2, nprobe=2)
        assert idx[0, 0] == 1 and idx[1, 0] == 0 and sims[0, 0] == pytest.approx(1.0)
        assert (idx[:, 3:] == -1).all() and (sims[:, 3:] == 0).all()
        assert not (idx == np.arange(4)[:, None]).any()


def test_knn_graph_ivf_exhaustive_equals_exact_and_default_is_accurate() -> None:
    x = clustered(3000, clusters=40)
    ref_s, ref_i = brute_graph(x, 30)
    calls: list[tuple[int, int]] = []
    sims, idx = knn_graph(
        x, 30, method="ivf", nlist=16, nprobe=16, progress=lambda d, t: calls.append((d, t))
    )
    np.testing.assert_allclose(sims, ref_s, atol=1e-5)
    assert recall_at_k(idx, ref_i) > 0.999
    assert not (idx == np.arange(len(x))[:, None]).any()
    assert calls[-1][0] == calls[-1][1] and len(calls) > 2
    _, approx = knn_graph(x, 30, method="ivf")
    assert recall_at_k(approx, ref_i) > 0.9
    with pytest.raises(ValueError):
        knn_graph(x, 30, method="hnsw-ish")


def test_neighbour_weights() -> None:
    sims = np.array([[0.8, 0.2, -0.3, 0.5], [-0.1, -0.2, 0.0, 0.3], [-0.5, -0.1, 0.0, 0.0]])
    ids = np.array([[1, 2, 3, -1], [4, 5, 6, -1], [7, 8, -1, -1]])
    w = neighbour_weights(sims, ids)
    np.testing.assert_allclose(w[0], [0.8, 0.2, 0.0, 0.0])
    np.testing.assert_allclose(w[1], [0.0, 0.0, 0.0, 0.0])  # only positive one is missing
    np.testing.assert_allclose(w[2], 0.0)
    assert (w >= 0).all()
    rng = np.random.default_rng(0)
    many = neighbour_weights(rng.uniform(-0.2, 1.0, (50, 30)), rng.integers(-1, 100, (50, 30)))
    sums = many.sum(axis=1)
    assert np.all((np.abs(sums - 1.0) < 1e-9) | (sums == 0.0))


def test_recall_at_k() -> None:
    assert recall_at_k(np.array([[1, 2], [3, 4]]), np.array([[1, 2], [5, 4]])) == 0.75
    assert recall_at_k(np.array([[1, -1]]), np.array([[1, -1]])) == 1.0


def grown(
    chunk: int, after_each: Callable[[FaissIndex], None] | None = None, **kw: float | int | None
) -> tuple[FaissIndex, dict[int, np.ndarray]]:
    """An index grown to 600 pages in chunks of ``chunk`` with replacements and removes on
    the way (what a crawl does), and the dict model of what it should hold; ``after_each``
    runs after every upsert and remove."""
    index = FaissIndex(dim=DIM, exact_below=40, nprobe=1024, threads=1, **kw)  # type: ignore[arg-type]
    x, later = clustered(600, DIM, seed=1), clustered(600, DIM, seed=2)
    model: dict[int, np.ndarray] = {}
    ops: list[tuple[str, np.ndarray, np.ndarray | None]] = []
    for lo in range(0, 600, 30):
        ids = np.arange(lo, lo + 30)
        ops.append(("upsert", ids, x[lo : lo + 30]))
        again = np.arange(0, lo + 30, 7)  # earlier pages change
        ops.append(("upsert", again, later[again]))
        if lo % 90 == 0:
            ops.append(("remove", np.arange(lo, lo + 30, 11), None))
    for op, ids, vecs in ops:
        for at in range(0, len(ids), chunk):
            part = ids[at : at + chunk]
            if op == "upsert":
                assert vecs is not None
                index.upsert(part, vecs[at : at + chunk])
                model.update(zip(part.tolist(), index.stored(vecs[at : at + chunk]), strict=True))
            else:
                index.remove(part)
                for page in part.tolist():
                    model.pop(page, None)
            if after_each is not None:
                after_each(index)
    return index, model


def test_a_growing_index_retrains_and_the_new_lists_take_over_at_defined_sizes() -> None:
    index, model = grown(1000, retrain_growth=2.0, takeover_growth=1.25)
    assert index.retrains >= 2 and index.lists > default_nlist(40)
    check_against_model(index, model, seed=3, tolerance=CODES_TOLERANCE)  # nothing lost
    never, _ = grown(1000, retrain_growth=None)
    assert never.retrains == 0 and never.lists == default_nlist(40)
    fixed, _ = grown(1000, nlist=1, retrain_growth=2.0)  # a chosen nlist is kept
    assert fixed.retrains == 0 and fixed.lists == 1


def test_by_default_the_lists_are_retrained_where_the_size_calls_for_twice_as_many() -> None:
    """Each retraining starts at the first size whose `default_nlist` is above the lists the
    index has (not before 1.5 x the size they were trained at), so the lists a search
    scans stay near ``nprobe * n / default_nlist(n)`` as the index grows."""
    index = FaissIndex(dim=16, exact_below=40, takeover_growth=1.0, retrain_takeover_growth=1.0)
    assert (index.lists, index.next_switch) == (0, 40)
    x = clustered(700, 16, seed=4)
    index.upsert(np.arange(40), x[:40])
    assert (index.lists, index.next_switch) == (0, 41)  # trained from 40, taking over at 41
    index.upsert(np.arange(40, 41), x[40:41])
    assert index.lists == default_nlist(40) == 1
    assert size_for_more_lists(1) == 78 and index.next_switch is None  # starts at 78: unseen
    index.upsert(np.arange(41, 77), x[41:77])
    assert index.lists == 1
    index.upsert(np.arange(77, 79), x[77:79])  # trained at 78 pages, taken over at the next
    assert (index.lists, index.retrains) == (default_nlist(78), 1) == (2, 1)
    sizes = []
    for page in range(79, 700):  # one page at a time: the sizes where the lists change
        lists = index.lists
        index.upsert(np.array([page]), x[page : page + 1])
        if index.lists != lists:
            sizes.append((page + 1, index.lists))
    assert sizes == [(size_for_more_lists(n) + 1, 2 * n) for n in (2, 4, 8)]
    for size, lists in sizes:
        assert default_nlist(size - 2) < lists == default_nlist(size - 1)


def test_retraining_does_not_depend_on_how_upserts_are_chunked() -> None:
    """Same upserts, same index: the retraining starts and takes over at the same sizes, so
    searches give the same pages in the same order."""
    results = []
    for chunk in (1, 7, 1000):
        index, model = grown(chunk, retrain_growth=2.0, takeover_growth=1.25)
        queries = np.stack([model[p] for p in sorted(model)[:40]])
        results.append((index.retrains, index.lists, *index.search(queries, 10)))
    for other in results[1:]:
        assert other[:2] == results[0][:2]
        assert np.array_equal(other[2], results[0][2]) and np.array_equal(other[3], results[0][3])


def test_changes_applied_to_a_built_index_before_its_takeover_give_the_same_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The changes made while an index trains are applied to it once it is built, a share
    at each update, not all at its takeover (where they stopped a live worker's batch); the
    index that takes over is the same either way: the same lists in the same order."""

    def built_at_once(index: FaissIndex) -> None:
        if index._retraining is not None:
            index._retraining.built.result()

    early, _ = grown(7, built_at_once, retrain_growth=2.0, takeover_growth=1.25)
    assert early.changes_caught_up > 0
    assert early.changes_at_takeover < early.changes_caught_up
    monkeypatch.setattr(FaissIndex, "_catch_up", lambda self, pages: None)
    late, model = grown(7, retrain_growth=2.0, takeover_growth=1.25)
    assert late.changes_caught_up == 0 and late.changes_at_takeover > 0
    assert (early.retrains, early.lists) == (late.retrains, late.lists) and late.retrains >= 2
    assert ivf_lists(early) == ivf_lists(late)
    queries = np.stack([model[p] for p in sorted(model)[:40]])
    a, b = early.search(queries, 10), late.search(queries, 10)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_next_switch_names_the_size_where_the_search_changes() -> None:
    """The first IVF takes over at ``takeover_growth`` times the size it was trained at, a
    retrained one at ``retrain_takeover_growth`` times."""
    index = FaissIndex(
        dim=16,
        exact_below=40,
        retrain_growth=2.0,
        takeover_growth=1.5,
        retrain_takeover_growth=1.25,
    )
    assert index.next_switch == 40
    x = clustered(200, seed=5)
    index.upsert(np.arange(40), x[:40])
    # The IVF trains in the background from these 40 pages; it takes over at 1.5 x 40, and
    # the search stays exact until then.
    assert not index.is_ivf and index.next_switch == 60
    index.upsert(np.arange(40, 59), x[40:59])
    assert not index.is_ivf
    index.upsert(np.arange(59, 60), x[59:60])
    assert index.is_ivf and index.next_switch is None  # retraining starts at 2 x 60, unseen
    index.upsert(np.arange(60, 120), x[60:120])
    assert index.next_switch == 150  # training started at 120; takes over at 1.25 x 120
    before = index.lists
    index.upsert(np.arange(120, 149), x[120:149])
    assert index.lists == before
    index.upsert(np.arange(149, 150), x[149:150])
    assert index.lists > before and index.retrains == 1 and index.next_switch is None


def test_an_index_tells_its_lists_and_the_lists_a_search_probes() -> None:
    index = FaissIndex(dim=DIM, exact_below=40, nprobe=6, threads=1, retrain_growth=None)
    x = clustered(80, DIM, seed=6)
    index.upsert(np.arange(39), x[:39])
    assert (index.lists, index.probes) == (0, 0)  # exact search
    index.upsert(np.arange(39, 80), x[39:])
    assert index.lists == default_nlist(40) and index.probes == min(6, index.lists)


@pytest.mark.parametrize("storage", ["float32", "float16"])
def test_a_page_that_barely_moved_keeps_its_list_and_every_list_is_the_nearest_centroids(
    storage: str,
) -> None:
    """Pages drifting a little at every upsert keep their IVF list without a centroid search
    while their slack lasts, and every page, kept or searched, sits in the list of its
    nearest centroid, as if each vector had been searched; repeats within a chunk too."""
    rng = np.random.default_rng(11)
    dim, n = 16, 600
    index = FaissIndex(dim=dim, exact_below=100, nlist=24, retrain_growth=None, storage=storage)
    x = clustered(n, dim, seed=11)
    index.upsert(np.arange(n), x)
    for round_ in range(6):
        x = x + rng.normal(0, 0.01 if round_ % 2 else 0.3, x.shape).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        order = rng.permutation(n)
        repeat = order[:50]  # these pages move twice within the chunk
        ids = np.concatenate([order, repeat])
        vectors = np.concatenate([x[order], x[repeat]])
        vectors[n:] += rng.normal(0, 0.005, vectors[n:].shape).astype(np.float32)
        x[repeat] = vectors[n:]
        index.upsert(ids, vectors)
    ivf = index._ivf
    assert ivf is not None
    nearest = index._centroids.search(index.reconstruct_many(np.arange(n)), 1)[1][:, 0]
    x_nearest = index._centroids.search(x, 1)[1][:, 0]
    held = [faiss_list(ivf, page) for page in range(n)]
    assert np.array_equal(held, x_nearest)
    assert np.mean(np.asarray(held) == nearest) > 0.99  # the stored copy, rounded
    assert 0 < index.lists_kept < 6 * (n + 50)


def test_an_upsert_takes_its_list_from_a_search_of_its_vector_only_while_it_is_near() -> None:
    """Pages searched, then upserted (some where they were searched, some a little away,
    some far away), take their IVF list from the search while within its slack and rank
    the centroids otherwise: the index ends as one given the same upserts unsearched."""
    rng = np.random.default_rng(5)
    dim, n = 16, 600
    searched = FaissIndex(dim=dim, exact_below=100, nlist=24, retrain_growth=None)
    unsearched = FaissIndex(dim=dim, exact_below=100, nlist=24, retrain_growth=None)
    x = clustered(n, dim, seed=5)
    for index in (searched, unsearched):
        index.upsert(np.arange(n), x)
    for round_ in range(4):
        queries = x + rng.normal(0, 0.3, x.shape).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        x = queries.copy()
        x[n // 3 :] += rng.normal(0, 0.002, x[n // 3 :].shape).astype(np.float32)
        x[2 * n // 3 :] = clustered(n - 2 * n // 3, dim, seed=50 + round_)  # moved far
        pages = np.arange(n)
        searched.search(queries[::2], k=5, exclude=pages[::2])
        searched.search(queries[1::2], k=5, exclude=pages[1::2])
        order = rng.permutation(n)
        for index in (searched, unsearched):
            index.upsert(order, x[order])
    assert searched.lists_from_search > n  # most of the pages near their query
    assert unsearched.lists_from_search == 0
    ivf = searched._ivf
    assert ivf is not None
    nearest = searched._centroids.search(searched.reconstruct_many(np.arange(n)), 1)[1][:, 0]
    assert [faiss_list(ivf, page) for page in range(n)] == nearest.tolist()
    probe = clustered(50, dim, seed=99)
    for a, b in zip(searched.search(probe, 20), unsearched.search(probe, 20), strict=True):
        np.testing.assert_array_equal(a, b)


def faiss_list(ivf: faiss.IndexIVF, page: int) -> int:
    """The IVF list that holds ``page``."""
    return int(faiss.lo_listno(ivf.direct_map.get(page)))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")
def test_indexes_are_trained_on_one_thread_at_the_lowest_cpu_priority() -> None:
    """The k-means yields the cores to the pipeline's own thread, so a retraining delays its
    takeover, not the events scored meanwhile; the pipeline's thread keeps its priority."""

    def niceness_and_threads() -> tuple[int, int]:
        niceness = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        return niceness, faiss.omp_get_max_threads()

    own, _ = niceness_and_threads()
    assert _background().submit(niceness_and_threads).result(timeout=30) == (19, 1)
    assert niceness_and_threads()[0] == own < 19
