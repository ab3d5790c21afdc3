"""Evaluate a replay run directory honestly: every score uses only fetches before its label.

Each row of ``features.parquet`` holds a page's features right after a fetch and its label,
the new outlinks at the page's next fetch, so scoring the features and judging on the label is
progressive validation by construction. Two views:

* ``round``, the paper's: for round r, rank every page by its score after crawl r-1 (rows with
  ``crawl == r - 1``) and judge on their labels, which come from crawl r;
* ``stream``: all labelled rows at once (each fetch judged on the page's next fetch).

Targets per labelled row (internal / external separately, as in the paper):

* ``nnl_*``: number of new outlinks at the next fetch (``nnl_total`` = internal + external);
* ``nl_*``: whether there is at least one;
* ``lcr_*``: the page's link change rate over its FUTURE labelled intervals in the run (this
  row's interval and every later one of the same page): the share of them with >= 1 new link.
  A row needs >= 2 such intervals, else it is left out of the LCR targets.

Rankings: the scorers recomputed from the feature columns, ``random`` (seeded uniform) and
``oracle`` (the truth itself, per target). A ranking ranks side targets by its expected
count for that side when it estimates one (its ``score`` otherwise); NL classification uses
``p_new`` (the scorers' probability of any new link, so it overstates one side's chance) and
LCR regression compares ``p_new`` with the rate; NNL regression uses the expected counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from batch.metrics import (
    DEFAULT_BUDGETS,
    Ranked,
    classification,
    poisson_loglik,
    precision_at_k,
    regression,
    spearman,
    yield_at_budget,
)
from batch.rundir import FEATURES_FILE
from online.features import feature_names
from online.ranking import significant
from online.scorers import LEARNED, get_scorer
from online.scoring import Scores

__all__ = [
    "DEFAULT_SCORERS",
    "METRICS",
    "TARGETS",
    "Prediction",
    "evaluate_arrays",
    "evaluate_rounds",
    "load_rows",
    "ranking_predictions",
    "ranking_scores",
    "summarise",
    "targets",
]

DEFAULT_SCORERS = ("lbla", "nnl-pr", "nnl-av", "ccr")
#: target name -> (kind, side)
TARGETS: dict[str, tuple[str, str]] = {
    "nnl_internal": ("nnl", "internal"),
    "nnl_external": ("nnl", "external"),
    "nnl_total": ("nnl", "total"),
    "nl_internal": ("nl", "internal"),
    "nl_external": ("nl", "external"),
    "lcr_internal": ("lcr", "internal"),
    "lcr_external": ("lcr", "external"),
}
_P_AT = (1, 5, 10, 20)
_BUDGET_NAMES = {b: round(b * 100) for b in DEFAULT_BUDGETS}
#: every metric column of the tidy table, in order
METRICS = [
    "spearman",
    "p_auc",
    *[f"p_at_{k}" for k in _P_AT],
    *[f"yield_{w}_{_BUDGET_NAMES[b]}" for b in DEFAULT_BUDGETS for w in ("share", "relative")],
    "recall",
    "precision",
    "f1",
    "balanced_accuracy",
    "r2",
    "mae",
    "medae",
    "poisson_loglik",
]
_KS = np.arange(1, 101)
_MU_FLOOR = 1e-6  # a zero expected count would make one surprise cost -inf log-likelihood


@dataclass(frozen=True)
class Prediction:
    """What a ranking says about each row; None where it estimates nothing of the kind."""

    score: np.ndarray
    p_new: np.ndarray | None
    internal: np.ndarray | None
    external: np.ndarray | None

    @classmethod
    def from_scores(cls, s: Scores) -> Prediction:
        return cls(s.score, s.p_new, s.expected_new_internal, s.expected_new_external)

    def take(self, idx: np.ndarray) -> Prediction:
        def sub(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[idx]

        return Prediction(self.score[idx], sub(self.p_new), sub(self.internal), sub(self.external))

    def count(self, side: str) -> np.ndarray | None:
        if side == "total":  # float noise of the sum must not split equal estimates' ties
            both = self.internal is not None and self.external is not None
            return significant(self.internal + self.external, 9) if both else None  # type: ignore[operator]
        return self.internal if side == "internal" else self.external


def load_rows(run_dir: str | Path) -> pd.DataFrame:
    """The run directory's feature rows (one per applied fetch, with labels)."""
    return pd.read_parquet(Path(run_dir) / FEATURES_FILE)


def _feature_matrix(df: pd.DataFrame) -> tuple[np.ndarray, dict[str, int]]:
    history = sum(1 for c in df.columns if c.startswith("dp_new_internal_") and c[-1].isdigit())
    names = [n for n in feature_names(history) if n in df.columns]
    return df[names].to_numpy(np.float64), {n: j for j, n in enumerate(names)}


def ranking_predictions(
    df: pd.DataFrame, scorers: Sequence[str] = DEFAULT_SCORERS, seed: int = 0
) -> dict[str, Prediction]:
    """Each scorer's predictions recomputed from the feature columns, plus ``random``.

    A learned scorer (``online``, ``batch``, ``ensemble``) cannot be recomputed from one row:
    its predictions are the ones the replay recorded (``score``, ``p_new``, expected counts),
    made before each label was known (progressive validation).
    """
    X, columns = _feature_matrix(df)
    out = {}
    for name in scorers:
        if name in LEARNED:
            out[name] = recorded_prediction(df)
        else:
            out[name] = Prediction.from_scores(get_scorer(name).score_matrix(X, columns))
    u = np.random.default_rng(seed).random(len(df))
    out["random"] = Prediction(u, u, None, None)
    return out


def recorded_prediction(df: pd.DataFrame) -> Prediction:
    """The predictions the replay itself made (its scorer's), as recorded per row."""

    def col(name: str) -> np.ndarray | None:
        return df[name].to_numpy(np.float64) if name in df.columns else None

    return Prediction(
        df["score"].to_numpy(np.float64),
        col("p_new"),
        col("expected_new_internal"),
        col("expected_new_external"),
    )


def ranking_scores(
    df: pd.DataFrame, scorers: Sequence[str] = DEFAULT_SCORERS, seed: int = 0
) -> dict[str, np.ndarray]:
    """Each ranking's score per row (scorers and ``random``; the evaluator adds ``oracle``)."""
    return {name: p.score for name, p in ranking_predictions(df, scorers, seed).items()}


def targets(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Every target per row, NaN where the row is not labelled (or, for LCR, has < 2 future
    labelled intervals)."""
    internal = df["label_new_internal"].to_numpy(np.float64)
    external = df["label_new_external"].to_numpy(np.float64)
    labelled = ~np.isnan(internal) & ~np.isnan(external)
    out = {
        "nnl_internal": np.where(labelled, internal, np.nan),
        "nnl_external": np.where(labelled, external, np.nan),
        "nnl_total": np.where(labelled, internal + external, np.nan),
        "nl_internal": np.where(labelled, internal > 0, np.nan),
        "nl_external": np.where(labelled, external > 0, np.nan),
    }
    # future intervals: this labelled row and the page's later labelled rows
    frame = pd.DataFrame(
        {
            "page": df["page_id"].to_numpy(),
            "at": df["fetched_at"].to_numpy(),
            "n": labelled.astype(np.int64),
            "internal": (labelled & (internal > 0)).astype(np.int64),
            "external": (labelled & (external > 0)).astype(np.int64),
        }
    )
    backwards = frame.sort_values(["page", "at"], ascending=[True, False], kind="stable")
    future = backwards.groupby("page", sort=False)[["n", "internal", "external"]].cumsum()
    future = future.reindex(frame.index)
    n = future["n"].to_numpy()
    ok = labelled & (n >= 2)
    for side in ("internal", "external"):
        rate = future[side].to_numpy() / np.maximum(n, 1)
        out[f"lcr_{side}"] = np.where(ok, rate, np.nan)
    return out


def _none(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def _metrics(kind: str, side: str, truth: np.ndarray, t: Ranked, pred: Prediction) -> dict:
    rank = pred.count(side)
    if rank is None:
        rank = pred.score
    row: dict[str, Any] = dict.fromkeys(METRICS)
    no_new = not bool((truth > 0).any())
    row["no_new_links"] = no_new
    if not no_new:  # an all-tied truth makes every ranking "perfect": report nothing instead
        p = Ranked(rank)
        row["spearman"] = spearman(p, t)
        pk = precision_at_k(p, t, _KS)
        row["p_auc"] = float(pk.mean())
        for k in _P_AT:
            row[f"p_at_{k}"] = float(pk[k - 1])
        if kind == "nnl":
            for b, r in yield_at_budget(p, truth, DEFAULT_BUDGETS).items():
                row[f"yield_share_{_BUDGET_NAMES[b]}"] = r["share"]
                row[f"yield_relative_{_BUDGET_NAMES[b]}"] = r["relative"]
    if kind == "nl" and pred.p_new is not None:
        row.update(classification(pred.p_new, truth))
    elif kind == "lcr" and pred.p_new is not None:
        row.update(regression(pred.p_new, truth))
    elif kind == "nnl" and (count := pred.count(side)) is not None:
        row.update(regression(count, truth))
        row["poisson_loglik"] = poisson_loglik(np.maximum(count, _MU_FLOOR), truth)
    return {k: (_none(v) if k in METRICS else v) for k, v in row.items()}


def _oracle(kind: str, side: str, truth: np.ndarray) -> Prediction:
    """The truth itself, laid out so that ``count(side)`` and ``p_new`` give it back."""
    p = (truth > 0).astype(float) if kind == "nnl" else truth
    internal = truth if side in ("internal", "total") else None
    external = truth if side == "external" else np.zeros_like(truth)
    return Prediction(truth, p, internal, external)


def evaluate_arrays(
    truths: Mapping[str, np.ndarray], predictions: Mapping[str, Prediction], oracle: bool = True
) -> list[dict[str, Any]]:
    """Metrics for one set of rows: one record per (target, ranking); NaN truth rows skipped.

    >>> truth = {"nnl_total": np.array([0.0, 3, 1, 0])}
    >>> recs = evaluate_arrays(truth, {})
    >>> [(r["ranking"], r["p_auc"], r["spearman"]) for r in recs]
    [('oracle', 1.0, 1.0)]
    """
    records = []
    for target, values in truths.items():
        kind, side = TARGETS[target]
        keep = np.flatnonzero(~np.isnan(values))
        if keep.size == 0:
            continue
        truth = values[keep]
        t = Ranked(truth)
        rankings = {name: p.take(keep) for name, p in predictions.items()}
        if oracle:
            rankings["oracle"] = _oracle(kind, side, truth)
        positives = int(np.count_nonzero(truth > 0))
        for name, pred in rankings.items():
            rec = {"target": target, "ranking": name, "n": int(keep.size), "positives": positives}
            rec.update(_metrics(kind, side, truth, t, pred))
            records.append(rec)
    return records


def _frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    table = pd.DataFrame.from_records(records)
    for col in METRICS:  # keep None as None (object) rather than letting pandas turn it to NaN
        values = [r.get(col) for r in records]
        if any(v is None for v in values):
            table[col] = pd.Series(values, index=table.index, dtype=object)
    return table


def evaluate_rounds(
    df: pd.DataFrame, scorers: Sequence[str] = DEFAULT_SCORERS, seed: int = 0
) -> pd.DataFrame:
    """Tidy table, one row per (view, round, target, ranking), metrics in `METRICS` columns.

    ``round`` is <NA> for the stream view. ``no_new_links`` marks a (round, target) where no
    page gained a link: its ranking metrics are None, not NaN.
    """
    rows = df.reset_index(drop=True)
    truth = targets(rows)
    labelled = np.flatnonzero(~np.isnan(truth["nnl_total"]))
    rows = rows.iloc[labelled].reset_index(drop=True)
    truth = {k: v[labelled] for k, v in truth.items()}
    preds = ranking_predictions(rows, scorers, seed)
    records: list[dict[str, Any]] = []
    crawls = rows["crawl"].to_numpy()
    for crawl in np.unique(crawls):
        idx = np.flatnonzero(crawls == crawl)
        sub_truth = {k: v[idx] for k, v in truth.items()}
        sub_preds = {k: p.take(idx) for k, p in preds.items()}
        for rec in evaluate_arrays(sub_truth, sub_preds):
            records.append({"view": "round", "round": int(crawl) + 1, **rec})
    for rec in evaluate_arrays(truth, preds):
        records.append({"view": "stream", "round": None, **rec})
    table = _frame(records)
    if len(table):
        table["round"] = table["round"].astype("Int64")
    return table


def _mean(values: pd.Series) -> float | None:
    defined = [float(v) for v in values if v is not None and not pd.isna(v)]
    return float(np.mean(defined)) if defined else None


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Per view × target × ranking: the mean over rounds (``stat="mean"``, undefined rounds
    skipped, ``rounds`` counts those taking part) and the last round (``stat="last"``); the
    stream view appears once as ``stat="all"``."""
    records: list[dict[str, Any]] = []
    for (view, target, ranking), group in table.groupby(["view", "target", "ranking"], sort=False):
        base = {"view": view, "target": target, "ranking": ranking}
        if view == "stream":
            row = group.iloc[0]
            rec = {**base, "stat": "all", "rounds": 1, "no_new_links": bool(row["no_new_links"])}
            records.append(rec | {m: _none_or(row[m]) for m in METRICS})
            continue
        group = group.sort_values("round")
        informative = group[~group["no_new_links"].astype(bool)]
        mean = {m: _mean(informative[m]) for m in METRICS}
        records.append(
            base
            | {"stat": "mean", "rounds": len(informative), "no_new_links": informative.empty}
            | mean
        )
        last = group.iloc[-1]
        records.append(
            base
            | {"stat": "last", "rounds": 1, "no_new_links": bool(last["no_new_links"])}
            | {m: _none_or(last[m]) for m in METRICS}
        )
    return _frame(records)


def _none_or(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)
