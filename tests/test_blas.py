"""FAISS's OpenBLAS runs the kernels the CPU's features allow (online.blas)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from online.blas import VARIABLE, core_for, cpu_flags, prefer_cpu_kernels

AVX512 = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def test_the_most_capable_core_whose_features_the_cpu_has_all_of() -> None:
    assert core_for(AVX512 | {"avx2", "fma"}) == "SkylakeX"
    assert core_for((AVX512 - {"avx512vl"}) | {"avx2", "fma"}) == "Haswell"
    assert core_for({"avx2"}) is None  # no FMA: OpenBLAS's own choice
    assert core_for(set()) is None


def test_a_core_type_the_user_set_stands() -> None:
    env = {VARIABLE: "Zen"}
    assert prefer_cpu_kernels(env, AVX512 | {"avx2", "fma"}) is None
    assert env == {VARIABLE: "Zen"}


@pytest.mark.skipif(platform.machine() != "x86_64", reason="core types are for x86-64")
def test_an_unset_core_type_is_set_from_the_features() -> None:
    env: dict[str, str] = {}
    assert prefer_cpu_kernels(env, {"avx2", "fma"}) == "Haswell"
    assert env == {VARIABLE: "Haswell"}
    empty: dict[str, str] = {}
    assert prefer_cpu_kernels(empty, {"sse2"}) is None and empty == {}


def test_flags_are_read_from_cpuinfo(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n\nflags\t: other\n")
    assert cpu_flags(info) == {"fpu", "sse2", "avx2", "fma"}
    assert cpu_flags(tmp_path / "missing") == set()


_FAISS_CORE = """
import json, online.index
from threadpoolctl import threadpool_info
print(json.dumps([i.get("architecture") for i in threadpool_info()
                  if i["internal_api"] == "openblas" and "faiss" in i["filepath"]]))
"""


def faiss_core(env: dict[str, str]) -> list[str]:
    """The core type of FAISS's OpenBLAS in a fresh process that imports the index."""
    done = subprocess.run(
        [sys.executable, "-c", _FAISS_CORE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


@pytest.mark.skipif(
    platform.machine() != "x86_64" or core_for(cpu_flags()) is None,
    reason="needs an x86-64 CPU with AVX2 and FMA",
)
def test_faiss_loads_its_openblas_with_the_cpus_kernels_or_the_users() -> None:
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    cores = faiss_core(env)
    if not cores:
        pytest.skip("this FAISS build has no OpenBLAS of its own")
    assert [c.lower() for c in cores] == [str(core_for(cpu_flags())).lower()]
    assert [c.lower() for c in faiss_core({**env, VARIABLE: "Haswell"})] == ["haswell"]
