"""The pipeline's processes keep BLAS / OpenMP at one thread, and the replay gives it back."""

from __future__ import annotations

import faiss  # noqa: F401  (loads its OpenMP and BLAS pools)
import numpy as np  # noqa: F401
from threadpoolctl import threadpool_info, threadpool_limits

from streams.maththreads import single_math_thread


def _threads() -> dict[str, int]:
    return {pool["filepath"]: pool["num_threads"] for pool in threadpool_info()}


def test_single_math_thread_limits_every_pool_and_restores_them() -> None:
    with threadpool_limits(limits=2):  # a known starting point, whatever the machine
        before = _threads()
        assert before and all(n == 2 for n in before.values())
        with single_math_thread():
            assert set(_threads().values()) == {1}
        assert _threads() == before
