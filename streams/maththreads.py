"""One math thread per process for the pipeline: BLAS and OpenMP pools set to a single thread.

The pipeline's matrices are small (a batch of ~1,000 rows), so BLAS or OpenMP threads
gain nothing there, yet between calls they spin-wait for work on the core the events reader,
the parser process or Redis needs: CPU burnt for nothing, and a slower replay
(bench/replay_throughput.py measures it).
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits


def single_math_thread() -> threadpool_limits:
    """Limit every BLAS / OpenMP pool loaded now to one thread; a context manager that
    restores the previous limits on exit (or keep it applied for a worker's lifetime)."""
    return threadpool_limits(limits=1)
