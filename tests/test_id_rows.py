"""IdRows against a dict: any sequence of numbering, inserts and removals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from online.id_rows import SORTED_SEARCH_FROM, SORTED_SEARCH_TABLE, IdRows

page_ids = st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(0, 40), max_size=30)
steps = st.lists(st.tuples(st.sampled_from(["number", "remove"]), page_ids), max_size=12)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_any_sequence_matches_a_dict(operations: list[tuple[str, list[int]]]) -> None:
    rows, model = IdRows(), {}
    next_row = 100
    for op, ids in operations:
        arr = np.array(ids, dtype=np.int64)
        if op == "number":
            got = rows.number(arr, start=next_row)
            for page in ids:  # new pages numbered in the order they first appear
                if page not in model:
                    model[page] = next_row
                    next_row += 1
            assert got.tolist() == [model[page] for page in ids]
        else:
            got = rows.remove(arr)
            expected = [model.pop(page) for page in dict.fromkeys(ids) if page in model]
            assert got.tolist() == expected
        assert len(rows) == len(model)
        assert rows.ids().tolist() == sorted(model)
        ids_now, rows_now = rows.items()
        assert dict(zip(ids_now.tolist(), rows_now.tolist(), strict=True)) == model
        probe = np.array([*ids, 7, -3], dtype=np.int64)
        found_rows, found = rows.find(probe)
        assert found.tolist() == [int(p) in model for p in probe]
        assert found_rows.tolist() == [model.get(int(p), 0) for p in probe]
        assert rows.contains(probe).tolist() == found.tolist()


def test_membership_of_odd_keys_is_false_not_an_error() -> None:
    rows = IdRows()
    rows.insert(np.array([5]), np.array([0]))
    assert 5 in rows and np.int64(5) in rows
    assert "5x" not in rows and None not in rows and 2**70 not in rows


def test_insert_keeps_the_given_rows_whatever_the_order() -> None:
    rows = IdRows()
    rows.insert(np.array([9, 3, 6]), np.array([0, 1, 2]))
    assert rows.find(np.array([3, 6, 9]))[0].tolist() == [1, 2, 0]
    with pytest.raises(ValueError):
        rows.insert(np.array([1, 2]), np.array([0]))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 2**12 - 1), max_size=40, unique=True),
    st.lists(st.integers(0, 2**8 - 1), max_size=20),
)
def test_with_prefixes_names_the_one_id_with_those_top_bits(ids: list[int], probes: list[int]):
    """Ids of 12 bits, prefixes of their top 8 (shift 4): an id where exactly one has the
    prefix, else -1, as a scan over the ids says."""
    rows = IdRows()
    rows.number(np.array(ids, dtype=np.int64), start=0)
    got = rows.with_prefixes(np.array(probes, dtype=np.int64), 4).tolist()
    for prefix, found in zip(probes, got, strict=True):
        having = [i for i in ids if i >> 4 == prefix]
        assert found == (having[0] if len(having) == 1 else -1)


@pytest.mark.parametrize("table", [1_000, SORTED_SEARCH_TABLE + 1_000])
def test_a_large_lookup_finds_the_same_rows_whichever_order_it_searches(table: int) -> None:
    """From `SORTED_SEARCH_FROM` ids on a table of `SORTED_SEARCH_TABLE` ids the lookup sorts
    its ids first: the rows and found flags must still come back in the order asked."""
    rng = np.random.default_rng(3)
    ids = np.unique(rng.integers(-(2**62), 2**62, table))
    rows = IdRows()
    given_rows = rng.permutation(len(ids))
    rows.insert(ids, given_rows)
    model = dict(zip(ids.tolist(), given_rows.tolist(), strict=True))
    asked = np.concatenate([rng.choice(ids, 3_000), rng.integers(-(2**62), 2**62, 1_000)])
    rng.shuffle(asked)
    assert len(asked) >= SORTED_SEARCH_FROM
    found_rows, found = rows.find(asked)
    assert found.tolist() == [int(page) in model for page in asked]
    assert found_rows.tolist() == [model.get(int(page), 0) for page in asked]
