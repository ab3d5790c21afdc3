"""Training sets from feature rows: labelled only, no label from the future, feature sets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from batch.datasets import (
    feature_columns,
    labelled,
    resolve_feature_set,
    split_by_time,
    training_set,
)
from batch.evaluate import load_rows
from batch.generate import GeneratorConfig
from online.errors import InputError


@pytest.fixture(scope="module")
def rows(generated_run) -> pd.DataFrame:
    return load_rows(generated_run("datasets", GeneratorConfig(pages=300, crawls=6, seed=3))[1])


def test_only_labelled_rows(rows: pd.DataFrame) -> None:
    lab = labelled(rows)
    assert len(lab) < len(rows) and lab["label_new_internal"].notna().all()
    assert lab["label_fetched_at"].notna().all()


@pytest.mark.parametrize("holdout", [1, 2])
def test_time_split_has_no_label_from_the_future(rows: pd.DataFrame, holdout: int) -> None:
    train, test = split_by_time(rows, holdout)
    assert len(train) and len(test)
    first_test_fetch = test["fetched_at"].min()
    assert (train["label_fetched_at"] <= first_test_fetch).all()
    assert test["crawl"].nunique() == holdout
    assert set(train["crawl"]).isdisjoint(set(test["crawl"]))
    by_time, _ = split_by_time(rows, at=first_test_fetch)
    assert len(by_time) == len(train)


def test_lcr_targets_do_not_see_held_out_intervals(rows: pd.DataFrame) -> None:
    train, _ = split_by_time(rows, 2)
    ts = training_set(train)
    lab = labelled(rows)
    whole = training_set(lab)
    # the last training crawl's rows have a single future interval inside the train side,
    # so their LCR is undefined there although the whole run would define it
    last = ts.rows["crawl"] == ts.rows["crawl"].max()
    assert np.isnan(ts.y["lcr_internal"][last.to_numpy()]).all()
    assert not np.isnan(whole.y["lcr_internal"]).all()


def test_too_few_crawls_to_hold_out(rows: pd.DataFrame) -> None:
    with pytest.raises(InputError, match=r"need more than 99 labelled crawl\(s\).* has 5"):
        split_by_time(rows, 99)


def test_feature_sets_by_name(rows: pd.DataFrame) -> None:
    assert resolve_feature_set("SP+SN+DP+DN/h3") == "SP+SN+DP+DN/3"
    with pytest.raises(ValueError, match="unknown feature set"):
        resolve_feature_set("XYZ")
    sp = feature_columns(rows.columns, "SP")
    assert sp and all(c.startswith("sp_") for c in sp)
    h1 = feature_columns(rows.columns, "SP+SN+DP+DN/1")
    assert "dp_new_internal_1" in h1 and "dp_new_internal_2" not in h1
    lbla = feature_columns(rows.columns, "LBLA")
    assert "dn_related_lcr_internal" in lbla and not any(c.startswith("sp_") for c in lbla)
    ts = training_set(rows, "LBLA", max_rows=100, seed=1)
    assert ts.X.shape == (100, len(lbla)) and ts.feature_names == lbla
    assert set(ts.y) >= {
        "nnl_internal",
        "nnl_external",
        "nl_internal",
        "nl_external",
        "lcr_internal",
        "lcr_external",
    }
    summary = ts.summary()
    assert summary["rows"] == 100 and summary["feature_set"] == "LBLA"
    assert set(summary["label_means"]) == {
        "nnl_internal",
        "nnl_external",
        "nl_internal",
        "nl_external",
    }
    assert pd.Timestamp(summary["first_fetch"]).tzinfo is not None


def test_training_set_copies_nothing_it_should_not(rows: pd.DataFrame, tmp_path: Path) -> None:
    ts = training_set(rows)
    assert not any(n.startswith("label_") for n in ts.feature_names)
    assert "score" not in ts.feature_names and "p_new" not in ts.feature_names
