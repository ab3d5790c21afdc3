"""Give the C heap's free pages back to the system, where the C library can (glibc).

glibc's allocator returns freed memory to the system only from the top of its heap; memory
freed in the middle (a batch's arrays, parsed events, numpy temporaries between long-lived
page records) stays in the process, counted in its resident size, until something is
allocated there again. A replay allocates and frees a batch's worth of objects thousands of
times while its page records pile up, so its resident size grows well past what it holds
(``python bench/replay_scale.py`` measures it). ``malloc_trim(0)`` hands every whole free
page back (``MADV_DONTNEED``); it walks the heap, so it is called every so many events, not
every batch. Elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

#: Events between two trims in a replay: often enough that the free pages of a few hundred
#: batches never pile up, rarely enough that the heap walks cost nothing measurable.
TRIM_EVERY_EVENTS = 50_000


#: Blocks at least this large get pages of their own (mmap), handed back when freed: an
#: epoch's chunks of rows and a search's gathers are larger; a batch's arrays (1 to 2 MB)
#: are not, since fresh pages cost a fault each and a lower bound slowed the replay
#: measurably (docs/benchmarks.md)
MMAP_THRESHOLD_BYTES = 4 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc's malloc.h)


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def _find_malloc_trim() -> Callable[[int], int] | None:
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def _find_mallopt() -> Callable[[int, int], int] | None:
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is not None:
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


_MALLOC_TRIM = _find_malloc_trim()
_MALLOPT = _find_mallopt()


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Give every block of ``nbytes`` or more pages of its own, for good; True if set.

    glibc starts with 128 kB, but raises the bound to the size of any such block freed (up
    to 32 MB). After the first large array freed, a replay's arrays of several MB (an epoch's
    chunk of 16,384 rows, a search's gathered candidates) come from the heap instead, and
    once freed they stay there as holes between long-lived page records until a trim; an
    epoch's passes over a million labels pile up hundreds of MB so. A fixed bound keeps them
    out of the heap."""
    return _MALLOPT is not None and bool(_MALLOPT(_M_MMAP_THRESHOLD, nbytes))


def release_free_heap() -> bool:
    """Return the heap's whole free pages to the system; True if any were (False also where
    the C library has no ``malloc_trim``)."""
    return _MALLOC_TRIM is not None and bool(_MALLOC_TRIM(0))


class HeapTrimmer:
    """Calls `release_free_heap` once every ``every`` events counted by `count`.

    >>> trimmer = HeapTrimmer(every=100)
    >>> [trimmer.count(60) for _ in range(4)]
    [False, True, False, True]
    """

    def __init__(self, every: int = TRIM_EVERY_EVENTS) -> None:
        if every < 1:
            raise ValueError("every must be >= 1")
        self.every = every
        self.trims = 0
        self._since = 0

    def count(self, events: int) -> bool:
        """Count ``events``; trims (and says so) once ``every`` have passed since the last."""
        self._since += events
        if self._since < self.every:
            return False
        self._since = 0
        self.trims += 1
        release_free_heap()
        return True
