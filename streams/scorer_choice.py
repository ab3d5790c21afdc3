"""Which scorer should be the default? Every scorer judged on held-out crawls.

1. replay the crawl with ``lbla`` (its rows are the training data);
2. train a batch model on the rows whose labels were seen before the held-out crawls
   (no refit: nothing from the held-out crawls reaches it);
3. replay again with ``online``, ``batch`` (that model) and ``ensemble``;
4. compare every ranking on the held-out crawls only: mean yield@10% of new outlinks per round,
   NL F1 and balanced accuracy per side.

``bench/scorer_choice.py`` prints the table; a test asserts the quality floors on it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from batch.datasets import split_by_time
from batch.evaluate import evaluate_rounds, load_rows, summarise
from batch.registry import ModelRegistry
from batch.train import train_and_register
from streams.replay import replay

FORMULAS = ("lbla", "nnl-av", "nnl-pr", "ccr")
LEARNED = ("online", "batch", "ensemble")


def _held_out(run: Path, scorer: str, crawls: set[int]) -> pd.DataFrame:
    df = load_rows(run)
    df = df[df["crawl"].isin(crawls)]
    names = (scorer, *FORMULAS) if scorer == "lbla" else (scorer,)
    table = summarise(evaluate_rounds(df, names))
    return table[(table["view"] == "round") & (table["stat"] == "mean")]


def compare_scorers(
    events: Path, out: Path, *, holdout_crawls: int = 4, kind: str = "extratrees"
) -> tuple[pd.DataFrame, dict]:
    """(one row per ranking: yield@10%, F1 / BA internal and external; facts of the split)."""
    replay(events, out / "lbla", scorer="lbla", progress=False)
    rows = load_rows(out / "lbla")
    train_rows, test_rows = split_by_time(rows, holdout_crawls)
    crawls = set(test_rows["crawl"].unique().tolist())
    registry = ModelRegistry(out / "models")
    result = train_and_register(
        out / "lbla", registry, kind=kind, holdout_crawls=holdout_crawls, refit=False
    )
    tables = [_held_out(out / "lbla", "lbla", crawls)]
    for scorer in LEARNED:
        replay(events, out / scorer, scorer=scorer, registry_dir=out / "models", progress=False)
        tables.append(_held_out(out / scorer, scorer, crawls))
    table = pd.concat(tables)
    wide: dict[str, dict[str, float]] = {}
    for (target, ranking), group in table.groupby(["target", "ranking"]):
        row = group.iloc[0]
        cell = wide.setdefault(str(ranking), {})
        if target == "nnl_total":
            cell["yield@10%"] = row["yield_share_10"]
        if target in ("nl_internal", "nl_external"):
            side = str(target).split("_")[1]
            cell[f"F1 {side}"] = row["f1"]
            cell[f"BA {side}"] = row["balanced_accuracy"]
    frame = pd.DataFrame(wide).T.astype(float).sort_values("yield@10%", ascending=False)
    facts = {
        "model": result.artifact.version,
        "kind": kind,
        "train_rows": len(train_rows),
        "held_out_crawls": sorted(crawls),
        "held_out_rows": len(test_rows),
    }
    return frame, facts
