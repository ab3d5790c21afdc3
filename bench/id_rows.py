"""`IdRows.find` with its ids searched in ascending order against searched in the order given,
on tables of 100,000 and 1,000,000 page ids (the core sorts them only from
`SORTED_SEARCH_TABLE` ids in the table and `SORTED_SEARCH_FROM` in the lookup).

Each lookup asks for ``n`` random ids of the table, new ones every time, and the CPU's caches
are flushed between lookups (a write over a 64 MB buffer), as in the core, where a batch's
lookups come between other work. Prints nanoseconds an id both ways and the ratio.

    python bench/id_rows.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import online.id_rows
from online.id_rows import IdRows

_FLUSH = np.zeros(64 * 1024**2 // 8)


def ns_an_id(
    rows: IdRows, ids: np.ndarray, n: int, lookups: int, rng: np.random.Generator
) -> float:
    spent = 0.0
    for _ in range(lookups):
        asked = ids[rng.integers(0, len(ids), n)]
        _FLUSH[:] += 1.0
        started = time.perf_counter()
        rows.find(asked)
        spent += time.perf_counter() - started
    return spent / lookups / n * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lookups", type=int, default=40)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sorted_from, sorted_table = (
        online.id_rows.SORTED_SEARCH_FROM,
        online.id_rows.SORTED_SEARCH_TABLE,
    )
    online.id_rows.SORTED_SEARCH_TABLE = 0  # both ways at every table size
    for pages in (100_000, 1_000_000):
        ids = rng.integers(0, 2**62, pages)
        rows = IdRows()
        rows.insert(np.unique(ids), np.arange(len(np.unique(ids))))
        for n in (1_000, 8_000, 32_000):
            online.id_rows.SORTED_SEARCH_FROM = sorted_from
            ascending = ns_an_id(rows, ids, n, args.lookups, rng)
            online.id_rows.SORTED_SEARCH_FROM = n + 1
            given = ns_an_id(rows, ids, n, args.lookups, rng)
            print(
                f"{pages:>9,} ids, lookups of {n:>6,}: in the order given {given:6.0f} ns an id, "
                f"ascending {ascending:6.0f} ns ({given / ascending:.2f} x)"
            )
    online.id_rows.SORTED_SEARCH_FROM = sorted_from
    online.id_rows.SORTED_SEARCH_TABLE = sorted_table


if __name__ == "__main__":
    main()
