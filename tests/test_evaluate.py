"""Evaluation of a replay run directory: targets, views, oracle, baselines, empty rounds."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from batch.evaluate import (
    METRICS,
    evaluate_rounds,
    load_rows,
    ranking_scores,
    summarise,
    targets,
)
from batch.generate import GeneratorConfig
from online import scorers as scoring

RANKING_METRICS = [
    "spearman",
    "p_auc",
    "p_at_1",
    "p_at_5",
    "p_at_10",
    "p_at_20",
    *[f"yield_relative_{b}" for b in (1, 5, 10, 20)],
]


@pytest.fixture(scope="module")
def rows(generated_run) -> pd.DataFrame:
    return load_rows(generated_run("eval", GeneratorConfig(pages=300, crawls=4, seed=1))[1])


@pytest.fixture(scope="module")
def table(rows: pd.DataFrame) -> pd.DataFrame:
    return evaluate_rounds(rows)


def _no_nan(table: pd.DataFrame) -> None:
    for col in METRICS:
        for v in table[col]:
            assert v is None or math.isfinite(v), (col, v)


def test_baselines_beat_random_and_oracle_is_perfect(table: pd.DataFrame) -> None:
    stream = table[(table["view"] == "stream") & (table["target"] == "nnl_total")]
    auc = stream.set_index("ranking")["p_auc"]
    assert auc["lbla"] > auc["random"]
    assert auc["nnl-av"] > auc["random"]
    oracle = table[(table["ranking"] == "oracle") & ~table["no_new_links"]]
    assert len(oracle) > 0
    for col in RANKING_METRICS:
        values = [v for v in oracle[col] if v is not None and not pd.isna(v)]
        assert values and all(v == pytest.approx(1.0, abs=1e-12) for v in values), col
    _no_nan(table)


def test_views_rounds_and_targets(table: pd.DataFrame, rows: pd.DataFrame) -> None:
    rounds = table.loc[table["view"] == "round", "round"].unique().tolist()
    assert sorted(rounds) == [1, 2, 3]  # crawl 3 has no next fetch, so no round 4
    assert table.loc[table["view"] == "stream", "round"].isna().all()
    assert set(table["ranking"]) == {"lbla", "nnl-pr", "nnl-av", "ccr", "random", "oracle"}
    r2 = table[(table["view"] == "round") & (table["round"] == 2)]
    labelled = rows[(rows["crawl"] == 1) & rows["label_new_internal"].notna()]
    assert (r2.loc[r2["target"] == "nnl_total", "n"] == len(labelled)).all()
    # classification only for NL, yield only for NNL
    assert table.loc[table["target"].str.startswith("nl"), "yield_share_10"].isna().all()
    assert table.loc[table["target"].str.startswith("nnl"), "f1"].isna().all()


def test_copy_of_nnl_av_reproduces_its_metrics(
    rows: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Copy(scoring.NNLAverageScorer):
        name = "copy"

    monkeypatch.setitem(scoring.SCORERS, "copy", Copy)
    t = evaluate_rounds(rows, scorers=("nnl-av", "copy"))
    a = t[t["ranking"] == "nnl-av"].reset_index(drop=True)
    b = t[t["ranking"] == "copy"].reset_index(drop=True)
    pd.testing.assert_frame_equal(a.drop(columns="ranking"), b.drop(columns="ranking"))


def test_round_without_new_links_is_reported(rows: pd.DataFrame) -> None:
    quiet = rows.copy()
    at = quiet["crawl"] == 1
    quiet.loc[at & quiet["label_new_internal"].notna(), "label_new_internal"] = 0
    quiet.loc[at & quiet["label_new_external"].notna(), "label_new_external"] = 0
    t = evaluate_rounds(quiet)
    r2 = t[(t["view"] == "round") & (t["round"] == 2) & t["target"].str.startswith("nnl")]
    assert r2["no_new_links"].all()
    for col in RANKING_METRICS:
        assert all(v is None for v in r2[col]), col
    assert not t.loc[(t["view"] == "round") & (t["round"] == 3), "no_new_links"].all()
    _no_nan(t)
    s = summarise(t)
    _no_nan(s)
    mean = s[(s["stat"] == "mean") & (s["target"] == "nnl_total") & (s["ranking"] == "oracle")]
    assert mean["rounds"].item() == 2 and mean["p_auc"].item() == 1.0


def test_summarise(table: pd.DataFrame) -> None:
    s = summarise(table)
    assert set(s["stat"]) == {"mean", "last", "all"}
    assert len(s[s["view"] == "round"]) == 2 * len(s[s["view"] == "stream"])
    last = s[(s["stat"] == "last") & (s["target"] == "nnl_total") & (s["ranking"] == "lbla")]
    want = table[
        (table["round"] == 3) & (table["target"] == "nnl_total") & (table["ranking"] == "lbla")
    ]
    assert last["p_auc"].item() == want["p_auc"].item()


def test_lcr_truth_uses_future_labelled_intervals() -> None:
    at = pd.to_datetime([0, 1, 2, 3, 0, 1], unit="D", utc=True)
    df = pd.DataFrame(
        {
            "page_id": [1, 1, 1, 1, 2, 2],
            "fetched_at": at,
            "label_new_internal": [1, 0, 2, None, 0, None],
            "label_new_external": [0, 0, 1, None, 0, None],
        }
    )
    t = targets(df)
    want = [2 / 3, 1 / 2, np.nan, np.nan, np.nan, np.nan]
    assert np.allclose(t["lcr_internal"], want, equal_nan=True)
    assert np.allclose(t["lcr_external"][:2], [1 / 3, 1 / 2])
    assert np.isnan(t["nnl_total"][3]) and t["nnl_total"][2] == 3 and t["nl_internal"][1] == 0


def test_ranking_scores(rows: pd.DataFrame) -> None:
    s = ranking_scores(rows, scorers=("lbla", "nnl-av"))
    assert set(s) == {"lbla", "nnl-av", "random"}
    assert all(len(v) == len(rows) and np.isfinite(v).all() for v in s.values())
    assert np.array_equal(s["random"], ranking_scores(rows, scorers=())["random"])


def test_load_rows(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_rows(tmp_path)
