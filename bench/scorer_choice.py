"""Which scorer should be the default? Yield@10% on held-out crawls, every scorer.

1. replay the crawl with ``lbla`` (its rows are the training data);
2. train a batch model on the rows whose labels were seen before the held-out crawls
   (`batch.train.train_and_register`, no refit: nothing from the held-out crawls);
3. replay again with ``online``, ``batch`` (that model) and ``ensemble``;
4. compare every ranking on the held-out crawls only: mean yield@10% of new outlinks, NL F1
   and balanced accuracy, and the online learner's share of the batch model's yield.

    python bench/scorer_choice.py --pages 10000 --crawls 10
    python bench/scorer_choice.py --events ../shared/data/S/crawls.jsonl.gz
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from batch.datasets import split_by_time
from batch.evaluate import evaluate_rounds, load_rows, summarise
from batch.generate import GeneratorConfig, write_events
from batch.registry import ModelRegistry
from batch.train import train_and_register
from streams.replay import replay

FORMULAS = ("lbla", "nnl-av", "nnl-pr", "ccr")
LEARNED = ("online", "batch", "ensemble")


def held_out(run: Path, scorer: str, crawls: set[int]) -> pd.DataFrame:
    df = load_rows(run)
    df = df[df["crawl"].isin(crawls)]
    names = (scorer, *FORMULAS) if scorer == "lbla" else (scorer,)
    table = summarise(evaluate_rounds(df, names))
    return table[(table["view"] == "round") & (table["stat"] == "mean")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=Path)
    ap.add_argument("--pages", type=int, default=10_000)
    ap.add_argument("--crawls", type=int, default=10)
    ap.add_argument("--holdout-crawls", type=int, default=4)
    ap.add_argument("--kind", default="extratrees")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="scorer-choice-"))
    events = args.events
    if events is None:
        events = out / "crawl.jsonl.gz"
        write_events(events, GeneratorConfig(pages=args.pages, crawls=args.crawls, seed=7))
    started = time.perf_counter()
    replay(events, out / "lbla", scorer="lbla", progress=False)
    rows = load_rows(out / "lbla")
    train_rows, test_rows = split_by_time(rows, args.holdout_crawls)
    crawls = set(test_rows["crawl"].unique().tolist())
    registry = ModelRegistry(out / "models")
    result = train_and_register(
        out / "lbla", registry, kind=args.kind, holdout_crawls=args.holdout_crawls, refit=False
    )
    print(
        f"batch model {result.artifact.version} ({args.kind}) trained on "
        f"{len(train_rows):,} rows; held-out crawls {sorted(crawls)} ({len(test_rows):,} rows)"
    )
    tables = [held_out(out / "lbla", "lbla", crawls)]
    for scorer in LEARNED:
        replay(events, out / scorer, scorer=scorer, registry_dir=out / "models", progress=False)
        tables.append(held_out(out / scorer, scorer, crawls))
    table = pd.concat(tables)
    wide = {}
    for (target, ranking), group in table.groupby(["target", "ranking"]):
        row = group.iloc[0]
        wide.setdefault(ranking, {})
        if target == "nnl_total":
            wide[ranking]["yield@10%"] = row["yield_share_10"]
        if target in ("nl_internal", "nl_external"):
            side = target.split("_")[1]
            wide[ranking][f"F1 {side}"] = row["f1"]
            wide[ranking][f"BA {side}"] = row["balanced_accuracy"]
    frame = pd.DataFrame(wide).T.astype(float).sort_values("yield@10%", ascending=False)
    print(frame.round(4).to_string())
    best = frame.drop(index=["oracle"], errors="ignore")["yield@10%"].idxmax()
    ratio = frame.loc["online", "yield@10%"] / frame.loc["batch", "yield@10%"]
    print(f"best by held-out yield@10%: {best}; online / batch yield: {ratio:.3f}")
    print(f"({time.perf_counter() - started:.0f} s; runs in {out})")



if __name__ == "__main__":
    main()
