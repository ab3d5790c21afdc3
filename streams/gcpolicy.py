"""Keep CPython's cyclic garbage collector off the pipeline's long-lived objects.

A replay holds a page state, a neighbour list and a stats row for every page for the whole
run. CPython's collector re-scans surviving objects again and again as they age; on a
100,000-page crawl that cost about a third of the replay's time. The pipeline makes no
reference cycles of its own, so after each batch whatever is alive is moved out of the
collector's sight (`gc.freeze`): young garbage is still collected as usual, and frozen
objects are still freed by reference counting when dropped.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def frozen_survivors() -> Iterator[Callable[[], None]]:
    """Context giving a ``settle()`` to call after each batch; everything is handed back to
    the collector on exit (so cycles that were frozen are reclaimed then)."""

    def settle() -> None:
        gc.collect(1)  # this batch's garbage cycles, not the long-lived objects
        gc.freeze()

    gc.freeze()
    try:
        yield settle
    finally:
        gc.unfreeze()
