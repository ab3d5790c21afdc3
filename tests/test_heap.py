"""`streams.heap`: the C heap's free pages handed back, in a fresh interpreter (what the
replay's page records and batches do to the heap, in small)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streams.heap import HeapTrimmer, release_free_heap

_FRAGMENTED = """
import sys
from streams.heap import release_free_heap

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024

# Batches of short-lived buffers between long-lived ones, as a replay makes them (above
# Python's small-object size, so from the C heap): once the batches are gone their pages are
# free but sit under the survivors, so the heap keeps them.
kept, batches = [], []
for _ in range(20_000):
    batches.append([bytes(1_000) for _ in range(10)])
    kept.append(bytes(1_000))
del batches
before = rss()
released = release_free_heap()
after = rss()
print(released, before, after)
"""


def _trim_available() -> bool:
    from streams import heap

    return heap._MALLOC_TRIM is not None


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _trim_available(),
    reason="malloc_trim is glibc's (Linux); elsewhere release_free_heap does nothing",
)
def test_free_pages_between_survivors_go_back_to_the_system() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENTED], capture_output=True, text=True, check=True
    ).stdout.split()
    released, before, after = out[0] == "True", int(out[1]), int(out[2])
    assert released
    # about 190 MB of batches were freed between the survivors; most of it goes back
    assert before - after > 100 * 1024**2, (before, after)


def test_the_trimmer_trims_once_every_so_many_events(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr("streams.heap.release_free_heap", lambda: calls.append(1) or True)
    trimmer = HeapTrimmer(every=1_000)
    assert [trimmer.count(n) for n in (400, 400, 400, 2_500, 10)] == [
        False,
        False,
        True,
        True,
        False,
    ]
    assert len(calls) == trimmer.trims == 2
    with pytest.raises(ValueError, match="every"):
        HeapTrimmer(every=0)
    assert isinstance(release_free_heap(), bool)


_BATCH_ARRAYS = """
import sys
import numpy as np
from streams.heap import fix_mmap_threshold

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024

fixed = fix_mmap_threshold() if sys.argv[1] == "fixed" else False
big = np.ones(20 << 20, np.uint8)
del big  # one big block freed: glibc raises its mmap bound past the arrays below
kept, arrays = [], []
for _ in range(30):  # arrays of several MB between long-lived small objects
    arrays.append(np.ones(6 << 20, np.uint8))
    kept.append([bytes(2000) for _ in range(50)])
before = rss()
del arrays
print(fixed, before, rss())
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _trim_available(),
    reason="mallopt's mmap threshold is glibc's (Linux)",
)
def test_a_fixed_mmap_threshold_hands_freed_batch_arrays_back() -> None:
    """180 MB of 6 MB arrays between survivors: with glibc's moving bound they come from the
    heap and stay when freed; with the bound fixed they go back at once."""
    freed = {}
    for mode in ("default", "fixed"):
        out = subprocess.run(
            [sys.executable, "-c", _BATCH_ARRAYS, mode], capture_output=True, text=True, check=True
        ).stdout.split()
        assert (out[0] == "True") == (mode == "fixed")
        freed[mode] = int(out[1]) - int(out[2])
    assert freed["fixed"] > 150 * 1024**2, freed
    assert freed["default"] < 50 * 1024**2, freed  # what the fix is for
