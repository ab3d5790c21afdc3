"""Which matrix kernels FAISS's bundled OpenBLAS runs: those of the CPU, not the oldest ones.

The faiss-cpu wheel carries its own OpenBLAS (0.3.15 in faiss-cpu 1.15), which picks its
kernels by the CPU's family and model number when it loads. A CPU newer than that table (a
virtual machine's "Intel Xeon Processor", say) falls back to the Prescott kernels (SSE3),
and every matrix product FAISS makes (its k-means training of the IVF lists, the exact
search of a small index) runs 3-4x slower than the CPU allows
(`python bench/blas_core.py` measures it). Newer OpenBLAS releases, numpy's among them,
choose by the CPU's features instead; `prefer_cpu_kernels` does the same for FAISS's: it
sets ``OPENBLAS_CORETYPE`` from the CPU's features before FAISS loads, unless it is set.

`online`'s and `batch`'s package imports call it, so it runs before any of their modules
imports FAISS; a script that imports FAISS itself imports `online` first.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path

#: OpenBLAS core types by the CPU features their kernels need, the most capable first.
CORES: tuple[tuple[str, frozenset[str]], ...] = (
    ("SkylakeX", frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})),
    ("Haswell", frozenset({"avx2", "fma"})),
)

VARIABLE = "OPENBLAS_CORETYPE"


def core_for(flags: Iterable[str]) -> str | None:
    """The most capable OpenBLAS core type whose kernels ``flags`` (the CPU's feature flags,
    as /proc/cpuinfo names them) allow; None when none does (OpenBLAS's own choice then).

    >>> core_for("fpu sse2 avx avx2 fma avx512f avx512cd avx512bw avx512dq avx512vl".split())
    'SkylakeX'
    >>> core_for(["sse2", "avx", "avx2", "fma"]), core_for(["sse2", "avx"])
    ('Haswell', None)
    """
    have = set(flags)
    return next((name for name, needs in CORES if needs <= have), None)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first CPU's feature flags (empty where /proc/cpuinfo is missing or has none)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return set(value.split())
    return set()


def prefer_cpu_kernels(
    environ: Mapping[str, str] | None = None, flags: Iterable[str] | None = None
) -> str | None:
    """Set ``OPENBLAS_CORETYPE`` in ``environ`` (the process's own by default) to the core
    type the CPU's features allow, on x86-64 and when it is not set already (a user's
    choice stands). Returns the value it set, or None. Only OpenBLAS libraries loaded after
    the call read it."""
    env = os.environ if environ is None else environ
    if VARIABLE in env or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    core = core_for(cpu_flags() if flags is None else flags)
    if core is not None:
        env[VARIABLE] = core  # type: ignore[index]
    return core


__all__ = ["CORES", "VARIABLE", "core_for", "cpu_flags", "prefer_cpu_kernels"]
