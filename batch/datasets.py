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
``LBLA``, ``LB``, ``LA``; and ``SP+semantic``: SP plus the ``sem_*`` columns that
`add_semantic_columns` derives from the events file (the feature rows carry no embedding).

>>> resolve_feature_set("SP+SN+DP+DN/h2")
'SP+SN+DP+DN/2'
>>> feature_columns(["sp_content_size", "dp_new_internal_1", "label_new_internal"], "SP")
['sp_content_size']
>>> feature_columns(["sem_1", "sp_content_size", "sem_0", "sem_10"], "SP+semantic")
['sp_content_size', 'sem_0', 'sem_1', 'sem_10']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from batch.evaluate import targets
from batch.reader import read_batches
from online.embedding import HashingTextEmbedder
from online.errors import InputError
from online.events import DEFAULT_EMBEDDING_DIM
from online.features import FEATURE_SETS, feature_names

__all__ = [
    "DEFAULT_FEATURE_SET",
    "SEMANTIC_FEATURE_SET",
    "TrainingSet",
    "add_semantic_columns",
    "feature_columns",
    "labelled",
    "resolve_feature_set",
    "run_history",
    "semantic_columns",
    "split_by_time",
    "training_set",
]

DEFAULT_FEATURE_SET = "SP+SN+DP+DN"
LABEL_COLUMNS = ("label_new_internal", "label_new_external", "label_interval_days")
#: SP plus the page's semantic embedding (``sem_*`` columns, batch side only: see
#: `add_semantic_columns`); the online scorers cannot compute it.
SEMANTIC_FEATURE_SET = "SP+semantic"
SEMANTIC_PREFIX = "sem_"
_BATCH_ONLY_SETS = (SEMANTIC_FEATURE_SET,)


def resolve_feature_set(name: str) -> str:
    """The canonical name of a feature set; ValueError lists the known ones."""
    canonical = name.replace("/h", "/")
    if canonical not in FEATURE_SETS and canonical not in _BATCH_ONLY_SETS:
        known = [*FEATURE_SETS, *_BATCH_ONLY_SETS]
        raise ValueError(f"unknown feature set {name!r}; choose one of {known}")
    return canonical


def semantic_columns(columns: Sequence[str]) -> list[str]:
    """The ``sem_<j>`` columns of a table, by component number."""
    sem = [c for c in columns if c.startswith(SEMANTIC_PREFIX) and c[4:].isdigit()]
    return sorted(sem, key=lambda c: int(c[4:]))


def run_history(columns: Sequence[str]) -> int:
    """The history size H a run was replayed with (its number of ``dp_new_internal_<lag>``)."""
    return sum(1 for c in columns if c.startswith("dp_new_internal_") and c[-1].isdigit())


def feature_columns(columns: Sequence[str], feature_set: str = DEFAULT_FEATURE_SET) -> list[str]:
    """The columns of ``feature_set`` that a table with ``columns`` has, in feature order."""
    have = set(columns)
    names = [n for n in feature_names(max(run_history(columns), 0)) if n in have]
    canonical = resolve_feature_set(feature_set)
    if canonical == SEMANTIC_FEATURE_SET:
        sem = semantic_columns(columns)
        if not sem:
            raise ValueError(
                f"feature set {SEMANTIC_FEATURE_SET!r} needs sem_* columns, which the replay's "
                "feature rows do not carry: run with the events file to add semantic columns "
                "(batch.datasets.add_semantic_columns)"
            )
        return FEATURE_SETS["SP"](names) + sem
    return FEATURE_SETS[canonical](names)


def _fetch_millis(fetched_at: pd.Series) -> np.ndarray:
    """Epoch milliseconds of a (tz-aware) timestamp column, as the replay rounds them."""
    ts = pd.to_datetime(fetched_at, utc=True)
    return ((ts - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)).to_numpy(np.int64)


def add_semantic_columns(
    df: pd.DataFrame,
    events_file: Path | str,
    components: int = 16,
    seed: int = 0,
    *,
    embedding_dim: int = DEFAULT_EMBEDDING_DIM,
    parallel: bool = False,
) -> pd.DataFrame:
    """``df`` with ``sem_0 .. sem_{components-1}``: each fetch's embedding, reduced by PCA.

    The events file (JSON Lines, .gz allowed) is read the way the replay reads it
    (`batch.reader.read_batches`: same validation and URL normalisation), and each fetch's
    vector is the pipeline's: the event's ``embedding`` as a unit vector when present, else
    `HashingTextEmbedder` (``embedding_dim``) on its ``text``, else none. Rows are joined on
    (normalised url, fetched_at in ms); a repeated (url, time) keeps its first event, as the
    pipeline applies the first and drops the duplicate. Rows without a vector (or without a
    matching event) get NaN in every ``sem_*`` column.

    The PCA (sklearn, ``random_state=seed``) is fitted on the vectors of all rows of ``df``,
    held-out crawls included. That is unsupervised (it never sees a label), so it leaks no
    target; it is the simplest honest choice. Components beyond what the vectors allow
    (fewer vectors than ``components``) are NaN, so the columns are the same for any run.
    """
    from sklearn.decomposition import PCA

    if components < 1:
        raise ValueError(f"components must be >= 1, got {components}")
    out = df.drop(columns=semantic_columns(df.columns))
    keys = list(zip(out["url"].tolist(), _fetch_millis(out["fetched_at"]).tolist(), strict=True))
    wanted = set(keys)
    embedder = HashingTextEmbedder(dim=embedding_dim)
    vectors: dict[tuple[str, int], np.ndarray | None] = {}
    by_text: dict[tuple[str, int], np.ndarray | None] = {}  # (url, source_fp): unchanged text
    for batch in read_batches(Path(events_file), embedding_dim=embedding_dim, parallel=parallel):
        for fetch in batch.fetches:
            key = (fetch.url, round(fetch.timestamp * 1000))
            if key not in wanted or key in vectors:
                continue
            vec = fetch.unit_vector()
            if vec is None and fetch.text:
                text_key = (fetch.url, fetch.source_fp)
                if text_key not in by_text:
                    by_text[text_key] = embedder.embed(fetch.text)
                vec = by_text[text_key]
            vectors[key] = vec
    have = [i for i, k in enumerate(keys) if vectors.get(k) is not None]
    sem = np.full((len(out), components), np.nan)
    if have:
        matrix = np.stack([vectors[keys[i]] for i in have]).astype(np.float64)
        k = min(components, matrix.shape[0], matrix.shape[1])
        sem[have, :k] = PCA(n_components=k, random_state=seed).fit_transform(matrix)
    sem_frame = pd.DataFrame(
        sem.astype(np.float32),
        columns=[f"{SEMANTIC_PREFIX}{j}" for j in range(components)],
        index=out.index,
    )
    return pd.concat([out, sem_frame], axis=1)


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
            raise InputError(
                f"need more than {holdout_crawls} labelled crawl(s) to hold {holdout_crawls} "
                f"out and train on the rest; the run has {len(crawls)} (a fetch is labelled by "
                "its page's next fetch, so a crawl of C rounds has C - 1): replay a crawl "
                "with more rounds, or hold fewer out (--holdout-crawls)"
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
