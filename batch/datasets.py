"""Leakage-free training sets from a replay's feature rows.

A row of ``features.parquet`` holds a page's features right after a fetch and its label: the new
outlinks the page showed at its NEXT fetch (``label_fetched_at``). A batch model may only learn
from labels that existed when it is used, so:

* only labelled rows take part (`labelled`);
* `split_by_time` holds out the last crawls: every training row's label was observed no later
  than the first fetch of the held-out rows (rows whose label falls after that moment are
  dropped, not trained on);
* targets are computed on each side of the split separately, so a training row's LCR (its
  page's link change rate over its future intervals) never counts a held-out interval.

Feature sets are the paper's, by name (`online.features.FEATURE_SETS`): ``SP``, ``SP+SN``,
``SP+SN+DP+DN``, ``SP+SN+DP+DN/h`` with history h = 0..8 (``/h3`` is accepted for ``/3``),
``LBLA``, ``LB``, ``LA``.

>>> resolve_feature_set("SP+SN+DP+DN/h2")
'SP+SN+DP+DN/2'
>>> feature_columns(["sp_content_size", "dp_new_internal_1", "label_new_internal"], "SP")
['sp_content_size']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from batch.evaluate import targets
from online.features import FEATURE_SETS, feature_names

__all__ = [
    "DEFAULT_FEATURE_SET",
    "TrainingSet",
    "feature_columns",
    "labelled",
    "resolve_feature_set",
    "run_history",
    "split_by_time",
    "training_set",
]

DEFAULT_FEATURE_SET = "SP+SN+DP+DN"
LABEL_COLUMNS = ("label_new_internal", "label_new_external", "label_interval_days")


def resolve_feature_set(name: str) -> str:
    """The canonical name of a feature set; ValueError lists the known ones."""
    canonical = name.replace("/h", "/")
    if canonical not in FEATURE_SETS:
        raise ValueError(f"unknown feature set {name!r}; choose one of {list(FEATURE_SETS)}")
    return canonical


def run_history(columns: Sequence[str]) -> int:
    """The history size H a run was replayed with (its number of ``dp_new_internal_<lag>``)."""
    return sum(1 for c in columns if c.startswith("dp_new_internal_") and c[-1].isdigit())


def feature_columns(columns: Sequence[str], feature_set: str = DEFAULT_FEATURE_SET) -> list[str]:
    """The columns of ``feature_set`` that a table with ``columns`` has, in feature order."""
    have = set(columns)
    names = [n for n in feature_names(max(run_history(columns), 0)) if n in have]
    return FEATURE_SETS[resolve_feature_set(feature_set)](names)


def labelled(df: pd.DataFrame) -> pd.DataFrame:
    """Only the rows whose page had a later fetch (both label counts known), index reset."""
    keep = df["label_new_internal"].notna() & df["label_new_external"].notna()
    return df.loc[keep].reset_index(drop=True)


def split_by_time(
    df: pd.DataFrame, holdout_crawls: int = 1, *, at: pd.Timestamp | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, held-out) labelled rows with no label from the future in train.

    Held out: the labelled rows of the last ``holdout_crawls`` crawls that have labels (or,
    with ``at``, the labelled rows fetched at or after ``at``). Train: labelled rows whose label
    was observed (``label_fetched_at``) no later than the first held-out fetch.
    """
    rows = labelled(df)
    if at is None:
        crawls = np.sort(rows["crawl"].unique())
        if holdout_crawls < 1 or len(crawls) <= holdout_crawls:
            raise ValueError(
                f"need more than {holdout_crawls} labelled crawls to hold some out; "
                f"have {len(crawls)}"
            )
        test_mask = rows["crawl"] >= crawls[-holdout_crawls]
        at = rows.loc[test_mask, "fetched_at"].min()
    else:
        test_mask = rows["fetched_at"] >= at
    train_mask = ~test_mask & (rows["label_fetched_at"] <= at)
    return rows.loc[train_mask].reset_index(drop=True), rows.loc[test_mask].reset_index(drop=True)


@dataclass(frozen=True)
class TrainingSet:
    """A feature matrix (NaN where unknown) and every target of the same labelled rows."""

    X: np.ndarray
    feature_names: list[str]
    feature_set: str
    y: dict[str, np.ndarray]  # batch.evaluate.targets: nnl_*, nl_*, lcr_* (NaN: undefined)
    interval_days: np.ndarray
    rows: pd.DataFrame = field(repr=False)  # id/time columns of the same rows

    def __len__(self) -> int:
        return len(self.X)

    @property
    def counts(self) -> np.ndarray:
        """(n, 2) new internal and external outlinks at the next fetch."""
        return np.column_stack([self.y["nnl_internal"], self.y["nnl_external"]])

    def take(self, idx: np.ndarray) -> TrainingSet:
        return TrainingSet(
            self.X[idx],
            self.feature_names,
            self.feature_set,
            {k: v[idx] for k, v in self.y.items()},
            self.interval_days[idx],
            self.rows.iloc[idx].reset_index(drop=True),
        )

    def summary(self) -> dict[str, Any]:
        """What a model artifact records about its training data."""
        if len(self) == 0:
            return {"rows": 0, "pages": 0, "feature_set": self.feature_set}

        def iso(v: Any) -> str:
            return pd.Timestamp(v).isoformat()

        return {
            "rows": len(self),
            "pages": int(self.rows["page_id"].nunique()),
            "crawls": sorted(int(c) for c in self.rows["crawl"].unique()),
            "first_fetch": iso(self.rows["fetched_at"].min()),
            "last_fetch": iso(self.rows["fetched_at"].max()),
            "last_label": iso(self.rows["label_fetched_at"].max()),
            "feature_set": self.feature_set,
            "features": len(self.feature_names),
            "interval_days_median": float(np.median(self.interval_days)),
            "label_means": {
                k: float(np.nanmean(self.y[k]))
                for k in ("nnl_internal", "nnl_external", "nl_internal", "nl_external")
            },
        }


_ID_COLUMNS = ("url", "page_id", "crawl", "fetched_at", "label_fetched_at")


def training_set(
    df: pd.DataFrame,
    feature_set: str = DEFAULT_FEATURE_SET,
    *,
    max_rows: int | None = None,
    seed: int = 0,
    features: Sequence[str] | None = None,
) -> TrainingSet:
    """The labelled rows of ``df`` as a `TrainingSet` (``max_rows``: a seeded row sample).

    Targets come from ``df`` alone, so pass one side of a split, never the whole run.
    ``features`` overrides the feature set's columns (e.g. a model's ``feature_names_``).
    """
    feature_set = resolve_feature_set(feature_set)
    rows = labelled(df)
    if max_rows is not None and len(rows) > max_rows:
        pick = np.sort(np.random.default_rng(seed).choice(len(rows), max_rows, replace=False))
        # targets first (LCR needs each page's later rows), then the sample
        y_all = targets(rows)
        rows = rows.iloc[pick].reset_index(drop=True)
        y = {k: v[pick] for k, v in y_all.items()}
    else:
        y = targets(rows)
    names = list(features) if features is not None else feature_columns(rows.columns, feature_set)
    missing = [n for n in names if n not in rows.columns]
    if missing:
        raise ValueError(f"the feature rows lack {len(missing)} columns: {missing[:5]}")
    return TrainingSet(
        X=rows[names].to_numpy(np.float64) if names else np.empty((len(rows), 0)),
        feature_names=names,
        feature_set=feature_set,
        y=y,
        interval_days=rows["label_interval_days"].to_numpy(np.float64),
        rows=rows[[c for c in _ID_COLUMNS if c in rows.columns]].copy(),
    )
