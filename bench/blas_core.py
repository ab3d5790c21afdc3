"""FAISS's matrix products with its OpenBLAS's own choice of kernels and with the CPU's.

Ranks ``--queries`` random queries in chunks of 128 (the pipeline's) against 1,024 and
4,096 IVF centroids of ``--dim`` dimensions (the lists of 100,000 and of 1,000,000 pages) with
FAISS's flat inner-product search, the step of every IVF search and upsert, once in a
process left to OpenBLAS's own choice and once with the core type `online.blas` picks from
the CPU's features, and prints the microseconds a query and the ratio. Each run is its own
process: OpenBLAS reads ``OPENBLAS_CORETYPE`` only as it loads.

    python bench/blas_core.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from online.blas import VARIABLE, core_for, cpu_flags

LISTS = (1_024, 4_096)

_CHILD = """
import json, sys, time
import faiss, numpy as np
from threadpoolctl import threadpool_info
faiss.omp_set_num_threads(1)
faiss.cvar.distance_compute_blas_threshold = 20
dim, queries, repeats = (int(a) for a in sys.argv[1:4])
rng = np.random.default_rng(0)
out = {"core": next((i.get("architecture") for i in threadpool_info()
                     if "faiss" in i["filepath"] and i["internal_api"] == "openblas"), None)}
for lists in (1024, 4096):
    index = faiss.IndexFlatIP(dim)
    index.add(rng.normal(size=(lists, dim)).astype(np.float32))
    x = rng.normal(size=(queries, dim)).astype(np.float32)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for at in range(0, queries, 128):
            index.search(x[at : at + 128], 16)
        best = min(best, time.perf_counter() - started)
    out[str(lists)] = best / queries
print(json.dumps(out))
"""


def run(env: dict[str, str], dim: int, queries: int, repeats: int) -> dict:
    """One child's figures: the core type FAISS's OpenBLAS runs and seconds a query by lists."""
    args = [sys.executable, "-c", _CHILD, str(dim), str(queries), str(repeats)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=192)
    parser.add_argument("--queries", type=int, default=2_560)
    parser.add_argument("--repeats", type=int, default=3, help="best of")
    args = parser.parse_args()
    core = core_for(cpu_flags())
    if core is None:
        raise SystemExit("this CPU has no AVX2: OpenBLAS's own choice is all there is")
    own = {k: v for k, v in os.environ.items() if k != VARIABLE}
    runs = {
        "OpenBLAS's own choice": run(own, args.dim, args.queries, args.repeats),
        f"{VARIABLE}={core}": run({**own, VARIABLE: core}, args.dim, args.queries, args.repeats),
    }
    print(f"ranking {args.queries:,} queries of {args.dim} dimensions, chunks of 128, one thread")
    for name, figures in runs.items():
        each = "  ".join(f"{lists:,} lists {figures[str(lists)] * 1e6:6.1f} us" for lists in LISTS)
        print(f"  {name:30s} core {figures['core'] or '?':10s} {each}")
    slow, fast = runs.values()
    ratios = "  ".join(f"{n:,} lists {slow[str(n)] / fast[str(n)]:.2f}x" for n in LISTS)
    print(f"  faster with the CPU's kernels: {ratios}")


if __name__ == "__main__":
    main()
