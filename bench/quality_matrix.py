"""The quality matrix: the default scorer, each candidate and each baseline on every kind of site.

See `streams.quality` for what is replayed and how each ranking is judged. Prints, per data set,
the default scorer's yield@10% against the best of NNL-Av, NNL-Pr and CCR, its Spearman against
NNL-Av's, which ranking it chose when, and whether the floors hold; then every ranking's
yield@10% / Spearman on every set. Writes ``matrix.json``, ``rankings.csv`` and ``matrix.png``
(yield@10% per ranking and set) to ``--out``. Then, per set, which feature families carried
weight in the refreshed model (`batch.importance`: permutation importance on the last crawls),
written to ``importance.csv``.

    python bench/quality_matrix.py                 # four generated regimes, plus S and N if at hand
    python bench/quality_matrix.py --scale small   # the sizes the tests use
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from batch.evaluate import load_rows
from batch.importance import permutation_importance
from streams.quality import (
    AVERAGE_FLOOR,
    Matrix,
    candidate_table,
    generated,
    real,
    run_matrix,
)


def plot(matrix: Matrix, path: Path) -> None:
    table = matrix.rankings()
    order = ["default", "nnl-av", "nnl-pr", "ccr", "lbla"]
    order += [r for r in table.index if r.startswith("candidate")]
    table = table.reindex([r for r in order if r in table.index])
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(table.index)
    for i, (name, row) in enumerate(table.iterrows()):
        xs = [j + i * width for j in range(len(table.columns))]
        ax.bar(xs, row.fillna(0).to_numpy(), width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(table.columns))], table.columns)
    ax.set_ylabel("yield@10% (relative to the best possible)")
    ax.set_title("New outlinks found by recrawling the top 10% of pages, mean over rounds 2..")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def importance(matrix: Matrix, out: Path, top: int = 5) -> None:
    """Print each set's ``top`` feature families and write them all to importance.csv."""
    tables = []
    print(f"\nfeature families that carried weight (top {top}; deviance rise when shuffled):")
    for result in matrix.sets:
        table = permutation_importance(load_rows(out / result.name))
        table.insert(0, "set", result.name)
        tables.append(table)
        head = ", ".join(
            f"{r.family} {r.share:.1%}" for r in table.head(top).itertuples() if r.importance > 0
        )
        print(f"  {result.name}: {head or 'none (no new link in the held-out crawls)'}")
    if tables:
        pd.concat(tables, ignore_index=True).to_csv(out / "importance.csv", index=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=("full", "small"), default="full")
    ap.add_argument("--out", type=Path, default=None, help="Where runs and outputs go.")
    ap.add_argument("--no-real", action="store_true", help="Leave out S and N.")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="quality-matrix-"))
    sets = generated(args.scale) + ([] if args.no_real else real())
    started = time.perf_counter()
    matrix = run_matrix(sets, out, say=lambda line: print(f"replaying {line}", flush=True))
    print()
    print(matrix.table().to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    ratio = matrix.average_ratio()
    print(f"\naverage yield@10% ratio to NNL-Av: {ratio:.3f} (floor {AVERAGE_FLOOR})")
    print("\nevery ranking, yield@10% / Spearman:")
    print(candidate_table(matrix).to_string())
    (out / "matrix.json").write_text(json.dumps(matrix.as_dict(), indent=2, default=str))
    matrix.rankings().to_csv(out / "rankings.csv")
    plot(matrix, out / "matrix.png")
    importance(matrix, out)
    floors = matrix.floors()
    missed = [name for name, ok in floors.items() if not ok]
    print(f"\nfloors: {'all met' if not missed else 'NOT met: ' + ', '.join(missed)}")
    print(f"({time.perf_counter() - started:.0f} s; runs, matrix.json, matrix.png in {out})")
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
