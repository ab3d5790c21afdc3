"""The compiled kernels against plain-Python statements of what each computes.

Kernels that stand in for the history update and the event parser are also checked where
those are tested (tests/test_history.py, tests/test_parse_fast.py); here each is held to its
own contract, on arbitrary input.
"""

from __future__ import annotations

import doctest
import math
import struct
from dataclasses import dataclass, fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from online import fastparse, kernels
from online.fetch import _FETCH_FIELDS, Fetch, _new_fetch, parse_fetch
from online.history import Interval, PageState


@pytest.mark.parametrize("module", [fastparse, kernels])
def test_doctests(module) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# -- vectors ----------------------------------------------------------------------------------


def reference_unit(values: list[float]) -> bytes:
    single = np.array(values, dtype=np.float32)
    total = 0.0
    for x in single.tolist():  # float64, in order
        total += x * x
    return (single.astype(np.float64) / math.sqrt(total)).astype("<f4").tobytes()


finite = st.floats(-1e30, 1e30, allow_nan=False, width=64) | st.integers(-(10**6), 10**6)


@settings(max_examples=500, deadline=None)
@given(st.lists(finite, min_size=1, max_size=12))
def test_unit_vector_from_list_is_the_float32_vector_scaled_in_order(values: list) -> None:
    got = fastparse.unit_vector_from_list(values, len(values))
    single = np.array(values, dtype=np.float32)
    if not single.any():
        assert got is None  # zero (in float32) is for the validator to reject
        return
    assert got == reference_unit(values)
    assert got == fastparse.unit_vector_bytes(single)
    assert abs(np.linalg.norm(np.frombuffer(got, "<f4")) - 1) < 1e-5


@pytest.mark.parametrize(
    "values",
    [
        [1.0, float("nan")],
        [1.0, float("inf")],
        [1e39, 1.0],  # beyond float32's range: the validator names it
        [0.0, 0.0],
        [1e-46, 1e-46],  # zero in float32
        [1.0, "2"],
        [1.0, True],
        [1.0, 10**400],
        (1.0, 2.0),  # not a list
        [1.0],  # wrong dimension
    ],
)
def test_unit_vector_from_list_declines_what_the_validator_must_judge(values) -> None:
    assert fastparse.unit_vector_from_list(values, 2) is None


# -- related-page means ----------------------------------------------------------------------


def reference_means(weights, versions, version):
    rows, k = weights.shape
    means = np.full((rows, versions.shape[1]), np.nan)
    known = np.zeros((rows, versions.shape[1]))
    for i in range(rows):
        for f in range(versions.shape[1]):
            num = den = 0.0
            for j in range(k):
                v = version[i, j]
                if v >= 0 and not math.isnan(versions[v, f]):
                    den += weights[i, j]
                    num += weights[i, j] * float(versions[v, f])
            known[i, f] = den
            if den > 0:
                means[i, f] = num / den
    return means, known


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_weighted_stat_means_equal_the_slot_order_sums(data) -> None:
    rows, k, n_versions, n_stats = (data.draw(st.integers(1, n)) for n in (5, 6, 7, 4))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    values = st.sampled_from([math.nan]) | st.floats(-1e3, 1e3, width=32)
    versions = data.draw(hnp.arrays(dtype, (n_versions, n_stats), elements=values))
    version = data.draw(hnp.arrays(np.int64, (rows, k), elements=st.integers(-1, n_versions - 1)))
    weights = data.draw(hnp.arrays(np.float64, (rows, k), elements=st.floats(0, 1)))
    means, known = kernels.weighted_stat_means(weights, versions, version)
    expected_means, expected_known = reference_means(weights, versions, version)
    assert np.array_equal(means, expected_means, equal_nan=True)
    assert np.array_equal(known, expected_known)


def test_weighted_stat_means_refuses_a_version_out_of_range() -> None:
    with pytest.raises(IndexError):
        kernels.weighted_stat_means(
            np.ones((1, 1)), np.ones((2, 3), np.float32), np.array([[2]], np.int64)
        )


# -- own history -----------------------------------------------------------------------------

intervals = st.builds(
    Interval, st.integers(0, 50), st.integers(0, 50), st.booleans(), st.floats(0.01, 30)
)
numbers = st.floats(allow_nan=True, allow_infinity=False, width=32)
states = st.builds(
    PageState,
    st.floats(0, 2e9),
    fetches=st.integers(0, 1000),
    errors=st.integers(0, 1000),
    window=st.lists(intervals, max_size=10).map(tuple),
    sp=st.tuples(*[numbers] * 5),
    sp_previous=st.tuples(*[numbers] * 5),
    sn=st.tuples(*[numbers] * 4),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(states, max_size=6), st.integers(0, 9))
def test_own_history_values_read_the_states(page_states: list[PageState], history: int) -> None:
    head, lags, lengths = kernels.own_history_values(page_states, history)
    for i, s in enumerate(page_states):
        expected = [*s.sp, *s.sp_previous, *s.sn, s.fetches, s.errors]
        assert np.array_equal(head[i], np.array(expected, dtype=np.float64), equal_nan=True)
        window = list(reversed(s.window[-history:] if history else ()))
        assert lengths[i] == len(window)
        assert np.array_equal(lags[i, : len(window)], np.array(window, dtype=float).reshape(-1, 4))
        assert np.isnan(lags[i, len(window) :]).all()


def test_own_history_values_refuse_what_is_not_a_state() -> None:
    with pytest.raises(TypeError):
        kernels.own_history_values([(1, 2, 3)], 2)


# -- records ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Triple:
    a: int
    b: str = "x"
    c: float | None = None


def test_slot_record_builds_what_the_dataclass_builds() -> None:
    build = kernels.SlotRecord(Triple, tuple(f.name for f in fields(Triple)))
    assert build(1, "y", 2.5) == Triple(1, "y", 2.5)
    with pytest.raises(TypeError, match="takes 3 values"):
        build(1, 2)
    event = b'{"url": "https://a.org/", "fetched_at": 1767607205, "outlinks": ["https://a.org/b"]}'
    fetch = parse_fetch(event)
    values = [getattr(fetch, name) for name in _FETCH_FIELDS]
    assert _new_fetch(*values) == Fetch(*values) == fetch


def test_gather_half_equals_numpy_cast_for_every_half_value():
    """Every one of the 65,536 half-precision bit patterns (NaNs, infinities, -0, subnormals)
    comes out as numpy's cast makes it, at any row order; rows out of range are refused."""
    from online.kernels import gather_half

    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).reshape(512, 128)
    rows = np.random.default_rng(0).permutation(512).astype(np.int64)
    got = gather_half(halves, rows)
    want = halves.view(np.float16)[rows].astype(np.float32)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))  # bit for bit
    with pytest.raises(IndexError, match="row 512"):
        gather_half(halves, np.array([0, 512], dtype=np.int64))


# -- top k ------------------------------------------------------------------------------------


def reference_top_k(scores: np.ndarray, k: int) -> tuple[list, list]:
    """Each row's k largest by a stable sort on descending score (ties to the lower column),
    padded with -inf and -1."""
    sims, cols = [], []
    for row in scores.tolist():
        order = sorted(range(len(row)), key=lambda c: -row[c])[:k]
        pad = k - len(order)
        sims.append([row[c] for c in order] + [-math.inf] * pad)
        cols.append(order + [-1] * pad)
    return sims, cols


#: few distinct values, so that ties are common; runs long enough to pass the screened blocks
scores_matrices = hnp.arrays(
    np.float32,
    st.tuples(st.integers(0, 6), st.integers(0, 70)),
    elements=st.sampled_from([-2.5, -1.0, 0.0, 0.25, 0.5, 1.0, 3.0]) | st.floats(-4, 4, width=32),
)


@settings(max_examples=400, deadline=None)
@given(scores=scores_matrices, k=st.integers(0, 20))
def test_top_k_rows_is_a_stable_descending_sort_cut_at_k(scores: np.ndarray, k: int) -> None:
    """Any scores, ties and rows shorter than k included: what a stable sort keeps."""
    sims, cols = kernels.top_k_rows(np.ascontiguousarray(scores), k)
    want_sims, want_cols = reference_top_k(scores, k)
    assert sims.shape == cols.shape == (len(scores), k)
    assert cols.tolist() == want_cols
    assert sims.tolist() == want_sims


def test_top_k_rows_refuses_a_negative_k() -> None:
    with pytest.raises(ValueError, match="k must be >= 0"):
        kernels.top_k_rows(np.zeros((1, 3), dtype=np.float32), -1)


def reference_dot(a: list[float], b: list[float]) -> float:
    """The kernel's fixed order in float32: eight running sums over every eighth dimension,
    added up pairwise, then the dimensions past the last full eight."""
    f = np.float32
    full = len(a) - len(a) % 8
    sums = [f(0.0)] * 8
    for i in range(0, full, 8):
        for t in range(8):
            sums[t] = f(sums[t] + f(a[i + t]) * f(b[i + t]))
    total = f(
        f(f(sums[0] + sums[1]) + f(sums[2] + sums[3]))
        + f(f(sums[4] + sums[5]) + f(sums[6] + sums[7]))
    )
    for i in range(full, len(a)):
        total = f(total + f(a[i]) * f(b[i]))
    return float(total)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), dim=st.integers(0, 21), count=st.integers(1, 5), n=st.integers(0, 4))
def test_gathered_dots_sum_each_pair_in_one_fixed_order(data, dim: int, count: int, n: int) -> None:
    """Each slot holds its pair's product as the fixed order sums it (so a pair gets the same
    number wherever it stands), -inf for -1; columns outside the block are left alone."""
    floats = st.floats(-2, 2, width=32)
    vectors = data.draw(hnp.arrays(np.float32, (count, dim), elements=floats))
    queries = data.draw(hnp.arrays(np.float32, (n, dim), elements=floats))
    width = data.draw(st.integers(0, 4))
    rows = data.draw(hnp.arrays(np.int64, (n, width), elements=st.integers(-1, count - 1)))
    out = np.full((n, width + 2), 7.0, dtype=np.float32)
    kernels.gathered_dots(vectors, rows, queries, out, 1)
    for i in range(n):
        assert out[i, 0] == out[i, -1] == 7.0
        for j in range(width):
            row = int(rows[i, j])
            want = (
                -math.inf if row < 0 else reference_dot(vectors[row].tolist(), queries[i].tolist())
            )
            assert out[i, 1 + j] == want


def test_gathered_dots_refuse_rows_and_shapes_out_of_range() -> None:
    vectors = np.ones((2, 3), dtype=np.float32)
    queries = np.ones((1, 3), dtype=np.float32)
    out = np.zeros((1, 2), dtype=np.float32)
    with pytest.raises(IndexError, match=r"row 2 outside 0\.\.1"):
        kernels.gathered_dots(vectors, np.array([[2]]), queries, out)
    with pytest.raises(ValueError, match="cannot take 2 columns at 1"):
        kernels.gathered_dots(vectors, np.array([[0, 1]]), queries, out, 1)
    with pytest.raises(ValueError, match="queries of shape"):
        kernels.gathered_dots(vectors, np.array([[0]]), np.ones((1, 2), np.float32), out)


@settings(max_examples=300, deadline=None)
@given(
    vector=hnp.arrays(
        st.sampled_from([np.float32, np.float64]),
        st.integers(0, 40),
        elements=st.floats(allow_nan=True, allow_infinity=True, width=32),
    ),
    levels=st.sampled_from([0, 1, 7, 127]),
)
def test_direction_codes_are_numpys_rounding_of_the_scaled_vector(vector, levels: int) -> None:
    """rint(v * (levels / max|v|)) in float64, zeros for a zero or non-finite vector."""
    v = vector.astype(np.float64)
    top = float(np.max(np.abs(v))) if v.size else 0.0
    if not np.isfinite(top) or top == 0.0:
        want = np.zeros(v.size, dtype=np.int8)
    else:
        want = np.rint(v * (levels / top)).astype(np.int8)
    assert kernels.direction_codes(vector, levels).tolist() == want.tolist()


def test_direction_codes_refuse_levels_past_a_byte() -> None:
    with pytest.raises(ValueError, match="levels must be within"):
        kernels.direction_codes(np.ones(3), 128)


# -- the embedded store's page records -----------------------------------------------------------


def reference_merge(old: bytes | None, new: list[bytes | None]) -> tuple[bytes, bool]:
    """A record rebuilt as the Python store did: each section given replaces the stored one."""
    stored = [b"", b"", b""]
    if old is not None:
        at = 12
        for j, length in enumerate(struct.unpack_from("<III", old)):
            stored[j] = old[at : at + length]
            at += length
    parts = [s if n is None else n for n, s in zip(new, stored, strict=True)]
    record = struct.pack("<III", *map(len, parts)) + b"".join(parts)
    return record, bool(parts[0]) and not stored[0]


section = st.one_of(st.none(), st.binary(max_size=40))


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, 20), st.lists(st.binary(max_size=30), min_size=3, max_size=3)),
    st.dictionaries(st.integers(0, 30), st.lists(section, min_size=3, max_size=3)),
)
def test_merge_page_records_replaces_the_sections_given(stored: dict, changed: dict) -> None:
    records = {pid: struct.pack("<III", *map(len, s)) + b"".join(s) for pid, s in stored.items()}
    expected, gained = dict(records), 0
    for pid, new in changed.items():
        expected[pid], first = reference_merge(records.get(pid), new)
        gained += first
    assert kernels.merge_page_records(records, changed) == gained
    assert records == expected
    for which in range(3):  # and what the reader reads back is each section as written
        read = kernels.record_sections([records[pid] for pid in changed], which)
        for pid, blob in zip(changed, read, strict=True):
            want = changed[pid][which]
            if want is None:
                want = stored.get(pid, [b"", b"", b""])[which]
            assert blob == (want or None)


def test_merge_page_records_refuses_a_truncated_record() -> None:
    records = {1: struct.pack("<III", 5, 0, 0) + b"abc"}
    with pytest.raises(ValueError, match="truncated page record"):
        kernels.merge_page_records(records, {1: [None, b"x", None]})
    with pytest.raises(ValueError, match="truncated page record"):
        kernels.merge_page_records({2: b"\x01"}, {2: [b"s", None, None]})


def reference_own_rows(page_states: list[PageState], depths: list, history: int) -> np.ndarray:
    """Own-feature rows as the column arithmetic computed them before the kernel: numpy over
    the batch, sums over the lags most recent first."""
    n_rows, h = len(page_states), max(history, 0)
    top, lags, lens = kernels.own_history_values(page_states, h)
    known = ~np.isnan(lags[:, :, 0])
    zeroed = np.where(known[:, :, None], lags, 0.0)
    sums, changes = np.zeros((n_rows, 4)), np.zeros((n_rows, 2))
    for j in range(h):
        sums += zeroed[:, j]
        changes += zeroed[:, j, :2] != 0
    n = lens.astype(np.float64)
    changed = (zeroed[:, :, 0] != 0) | (zeroed[:, :, 1] != 0)
    first_change = np.where(changed, np.arange(h), h).min(axis=1, initial=h)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_day = np.where(sums[:, 3:4] > 0, sums[:, :2] / sums[:, 3:4], np.nan)
        means = [sums[:, 0] / n, sums[:, 1] / n, changes[:, 0] / n, changes[:, 1] / n]
        means += [sums[:, 2] / n, sums[:, 3] / n]
        first = np.minimum(first_change, lens).astype(np.float64)
        aggregates = np.column_stack([n, top[:, -2], top[:, -1], *means, per_day, first])
    aggregates[lens == 0, 3:] = np.nan
    depth = np.array(depths, dtype=np.float64).reshape(n_rows, 2)
    parts = [top[:, :5], depth, top[:, 10:14], top[:, 5:10]]
    return np.concatenate([*parts, *(lags[:, :, f] for f in range(4)), aggregates], axis=1)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(states, max_size=6),
    st.integers(0, 9),
    st.data(),
)
def test_own_feature_rows_are_the_column_arithmetic_bit_for_bit(
    page_states: list[PageState], history: int, data
) -> None:
    depth = st.tuples(st.floats(0, 20), st.floats(0, 5))
    depths = data.draw(st.lists(depth, min_size=len(page_states), max_size=len(page_states)))
    rows = kernels.own_feature_rows(page_states, depths, history)
    expected = reference_own_rows(page_states, depths, history)
    assert rows.shape == expected.shape == (len(page_states), 28 + 4 * history)
    assert rows.tobytes() == expected.tobytes() or np.array_equal(rows, expected, equal_nan=True)


def test_own_feature_rows_refuse_depths_that_do_not_match() -> None:
    with pytest.raises(ValueError, match="1 depths for 2 states"):
        kernels.own_feature_rows([PageState(0.0), PageState(1.0)], [(1.0, 1.0)], 3)


def test_merge_page_records_refuses_sections_of_another_shape() -> None:
    with pytest.raises(ValueError, match="2 sections for page 1, not 3"):
        kernels.merge_page_records({}, {1: [b"s", None]})
    with pytest.raises(TypeError):
        kernels.merge_page_records({}, {1: (b"s", None, None)})
    with pytest.raises(TypeError):
        kernels.merge_page_records({}, {1: ["s", None, None]})


# -- stats rows out of Redis record heads -----------------------------------------------------


def _stats_head(version: int, stats: bytes, tail: bytes = b"") -> bytes:
    """A record head as `streams.redis_scripts` lays it out, its stats, then what the stats
    read takes of the next section."""
    from streams.redis_scripts import RECORD_HEADS

    return RECORD_HEADS[version].pack(version, len(stats), len(tail), 0, 0, 0) + stats + tail


@settings(max_examples=200, deadline=None)
@given(
    wide=st.lists(st.booleans(), min_size=1, max_size=9),
    rows=st.lists(
        st.tuples(st.sampled_from(["full", "compact", "none", "empty"]), st.sampled_from([1, 2])),
        max_size=12,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_record_head_stats_decodes_what_unpack_float_rows_decodes(
    wide: list[bool], rows: list[tuple[str, int]], seed: int
) -> None:
    from online.stores import pack_float_rows, to_half, unpack_float_rows

    flags = np.array(wide, dtype=bool)
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(len(rows), len(wide))).astype(np.float32) * 100
    values[rng.random(values.shape) < 0.1] = np.nan
    compact = [kind == "compact" for kind, _ in rows]
    values[compact] = to_half(values[compact], flags)
    blobs = pack_float_rows(values, flags) if len(rows) else []
    heads: list[bytes | None] = []
    for (kind, version), blob in zip(rows, blobs, strict=True):
        if kind == "compact":
            assert blob[0] == 1  # a row of half-precision narrow values packs compact
        stats = b"" if kind == "empty" else blob
        heads.append(None if kind == "none" else _stats_head(version, stats, b"st"))
    out = np.full((len(rows), len(wide)), np.nan, dtype=np.float32)
    assert kernels.record_head_stats(heads, flags.astype(np.uint8), out) == (-1, 0, 0, 0)
    expected = np.full_like(out, np.nan)
    present = [i for i, (kind, _) in enumerate(rows) if kind in ("full", "compact")]
    if present:
        expected[present] = unpack_float_rows([blobs[i] for i in present], flags, len(wide))
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))


def test_record_head_sizes_are_the_scripts_heads() -> None:
    from streams.redis_scripts import RECORD_HEADS

    wide = np.zeros(1, dtype=np.uint8)
    out = np.zeros((1, 1), dtype=np.float32)
    stats = b"\x00" + np.float32(2.5).tobytes()
    for version, head in RECORD_HEADS.items():
        record = head.pack(version, len(stats), 0, 0, 0, 0) + stats
        assert kernels.record_head_stats([record], wide, out) == (-1, 0, 0, 0)
        assert out[0, 0] == 2.5
        out[0, 0] = 0
        assert kernels.record_head_stats([record[: head.size - 1]], wide, out) == (0, 1, 0, 0)


def test_record_head_stats_names_the_first_bad_head() -> None:
    wide = np.array([0, 1], dtype=np.uint8)
    good = _stats_head(2, b"\x00" + np.array([1, 2], dtype="<f4").tobytes())
    truncated = _stats_head(2, b"\x00" + np.array([1, 2], dtype="<f4").tobytes())[:-2]
    out = np.zeros((4, 2), dtype=np.float32)
    assert kernels.record_head_stats([good, truncated, b"x"], wide, out) == (1, 2, 7, 9)
    assert kernels.record_head_stats([good, b"x", truncated], wide, out) == (1, 1, 0, 0)
    assert kernels.record_head_stats([good, 0], wide, out) == (1, 1, 0, 0)
    assert kernels.record_head_stats([_stats_head(1, b"\x07abc")], wide, out) == (0, 3, 4, 0)
    assert kernels.record_head_stats([_stats_head(2, b"\x01" + b"\0" * 5)], wide, out) == (
        0,
        2,
        6,
        7,
    )
    with pytest.raises(ValueError, match="wide flags"):
        kernels.record_head_stats([good], np.zeros(3, dtype=np.uint8), out)
    with pytest.raises(ValueError, match="heads for 4 rows"):
        kernels.record_head_stats([good] * 5, wide, out)
