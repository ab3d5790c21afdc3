"""Page id -> row of a table, as two sorted arrays.

The core keeps per-page rows in numpy tables (the index's vector mirror, the embedded store's
stats, the outputs writer's pending rows) and needs each page's row. A dict of a million int
keys takes about 100 bytes a page in entries and int objects; two sorted int64 arrays take 16,
and a batch's thousands of lookups are one binary search (`find`). Inserting a batch's new
pages copies the arrays once (`np.insert`), which a million pages afford: new pages come in
batches, not one by one.
"""

from __future__ import annotations

import numpy as np

__all__ = ["IdRows"]

_NO_IDS = np.empty(0, np.int64)
#: A lookup of this many ids or more searches them in ascending order once the table has
#: `SORTED_SEARCH_TABLE` ids (2 MB, past a core's own cache): numpy's binary search then starts
#: each id where the one before it ended and walks memory forwards, which more than pays for
#: the sort (`bench/id_rows.py`); a smaller table is searched fast enough in any order.
SORTED_SEARCH_FROM = 256
SORTED_SEARCH_TABLE = 1 << 18


def _search_sorted(known: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``np.searchsorted(known, ids)``, the ids searched in ascending order when it pays."""
    if len(ids) < SORTED_SEARCH_FROM or len(known) < SORTED_SEARCH_TABLE:
        return np.searchsorted(known, ids)
    order = np.argsort(ids)
    at = np.empty(len(ids), np.int64)
    at[order] = np.searchsorted(known, ids[order])
    return at


class IdRows:
    """Page id -> row, for a table whose rows the caller hands out.

    >>> rows = IdRows()
    >>> rows.insert(np.array([30, 10]), np.array([0, 1]))
    >>> found_rows, found = rows.find(np.array([10, 20, 30]))
    >>> found_rows.tolist(), found.tolist()
    ([1, 0, 0], [True, False, True])
    >>> rows.number(np.array([20, 10, 40, 20]), start=2).tolist()
    [2, 1, 3, 2]
    >>> rows.remove(np.array([30, 99])).tolist(), len(rows), rows.ids().tolist()
    ([0], 3, [10, 20, 40])
    """

    def __init__(self) -> None:
        self._ids = _NO_IDS  # sorted
        self._rows = _NO_IDS  # the row of each of `_ids`

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, page_id: object) -> bool:
        try:
            key = int(page_id)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return False
        if not -(2**63) <= key < 2**63:
            return False
        at = int(np.searchsorted(self._ids, key))  # one id: a scalar search, no arrays
        return at < len(self._ids) and int(self._ids[at]) == key

    def find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each id's row (0 where it has none) and whether it has one."""
        ids = np.asarray(ids, dtype=np.int64)
        known = self._ids
        if not len(known):
            return np.zeros(len(ids), np.int64), np.zeros(len(ids), bool)
        at = np.minimum(_search_sorted(known, ids), len(known) - 1)
        found = known[at] == ids
        return np.where(found, self._rows[at], 0), found

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Whether each id has a row (bool array)."""
        return self.find(ids)[1]

    def with_prefixes(self, prefixes: np.ndarray, shift: int) -> np.ndarray:
        """For each prefix, the one id with a row whose bits above the lowest ``shift`` are
        that prefix (``id >> shift == prefix``), or -1 where none or several have a row."""
        start = np.asarray(prefixes, dtype=np.int64) << shift
        if not len(self._ids):
            return np.full(len(start), -1, np.int64)
        first = np.searchsorted(self._ids, start)
        one = np.searchsorted(self._ids, start + (1 << shift)) - first == 1
        return np.where(one, self._ids[np.minimum(first, len(self._ids) - 1)], -1)

    def insert(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Give ids that have no row yet (no repeats) their rows."""
        ids, rows = np.asarray(ids, dtype=np.int64), np.asarray(rows, dtype=np.int64)
        if len(ids) != len(rows):
            raise ValueError(f"{len(ids)} ids for {len(rows)} rows")
        if not len(ids):
            return
        order = np.argsort(ids, kind="stable")
        ids, rows = ids[order], rows[order]
        where = np.searchsorted(self._ids, ids)
        self._ids = np.insert(self._ids, where, ids)
        self._rows = np.insert(self._rows, where, rows)

    def number(self, ids: np.ndarray, start: int) -> np.ndarray:
        """Each id's row, ids without one numbered on from ``start`` in the order they first
        appear (and kept)."""
        ids = np.asarray(ids, dtype=np.int64)
        out, found = self.find(ids)
        if found.all():
            return out
        new, first, inverse = np.unique(ids[~found], return_index=True, return_inverse=True)
        numbered = np.empty(len(new), np.int64)
        numbered[np.argsort(first, kind="stable")] = np.arange(start, start + len(new))
        out[~found] = numbered[inverse.reshape(-1)]
        self.insert(new, numbered)
        return out

    def remove(self, ids: np.ndarray) -> np.ndarray:
        """Forget the ids that have a row; their rows, in the order of ``ids`` (an id given
        twice counts once)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids) or not len(self._ids):
            return _NO_IDS.copy()
        _, first = np.unique(ids, return_index=True)
        ids = ids[np.sort(first)]
        at = np.minimum(np.searchsorted(self._ids, ids), len(self._ids) - 1)
        found = self._ids[at] == ids
        rows = self._rows[at[found]]
        self._ids = np.delete(self._ids, at[found])
        self._rows = np.delete(self._rows, at[found])
        return rows

    def ids(self) -> np.ndarray:
        """The ids with a row, ascending (a copy)."""
        return self._ids.copy()

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """The ids, ascending, and their rows (copies)."""
        return self._ids.copy(), self._rows.copy()
