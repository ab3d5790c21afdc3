"""Keep CPython's cyclic garbage collector off the pipeline's long-lived objects.

CPython's collector re-scans surviving objects again and again as they age. Objects moved
out of its sight (`gc.freeze`) are still freed by reference counting when dropped; only
cyclic garbage among them is not collected. Two policies, for the two kinds of process:

* `frozen_survivors`, for a replay (which ends): it holds a page state, a neighbour list and
  a stats row for every page for the whole run, and re-scanning them cost about a third of a
  100,000-page replay. The pipeline makes no reference cycles of its own, so after each
  batch whatever is alive is frozen, and the young garbage is collected then, once a batch
  (`REPLAY_THRESHOLDS`) rather than every 700 allocations: a batch allocates some hundred
  thousand objects, nearly all freed by reference counting, and its collections re-scanned
  the batch's own live objects over and over (about 3% of a replay's time: 7,709
  collections and 1.1 s of a 30,000-page replay, 301 and 0.2 s once a batch).
* `freeze_startup_heap`, for a live worker (which runs for weeks): only what exists once the
  worker is ready to consume (modules, models, the FAISS replica) is frozen, once.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def freeze_startup_heap() -> int:
    """Move every object alive now out of the collector's sight; returns how many.

    A worker's imports, models and replica are hundreds of thousands of tracked objects that
    live as long as the process; each full collection would re-scan them all, a large share
    of a busy worker's time (docs/benchmarks.md). Freezing per batch, as a replay does, would
    suit a worker badly: cyclic garbage among frozen objects is never collected, and a worker
    runs for weeks. Objects frozen here are still freed by reference counting when dropped.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*WORKER_THRESHOLDS)
    return gc.get_freeze_count()


#: A live worker's collection thresholds, once its startup heap is frozen: young collections
#: every 5,000 allocations. Against CPython's (700, 10, 10) or (50,000, 20, 100) no difference in
#: a worker's events/s could be measured (docs/benchmarks.md, "Where a live worker's time goes").
WORKER_THRESHOLDS = (5000, 20, 100)
#: A replay's young collections: rare enough that a batch (1,000 events make some 100,000
#: container objects, most of them freed by reference counting) runs through without one;
#: ``settle`` collects what is left after each batch.
REPLAY_THRESHOLDS = (200_000, 10, 10)


@contextmanager
def frozen_survivors() -> Iterator[Callable[[], None]]:
    """Context giving a ``settle()`` to call after each batch; everything is handed back to
    the collector on exit (so cycles that were frozen are reclaimed then)."""

    def settle() -> None:
        gc.collect(1)  # this batch's garbage cycles, not the long-lived objects
        gc.freeze()

    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*REPLAY_THRESHOLDS)
    try:
        yield settle
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
