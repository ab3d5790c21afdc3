"""`lookaround train` and `lookaround experiment` end to end on a small generated run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from batch.evaluate import load_rows
from batch.experiment import ExperimentConfig, run_experiment
from batch.generate import GeneratorConfig
from batch.registry import ModelRegistry
from streams.cli import app


@pytest.fixture(scope="module")
def run_dir(generated_run) -> Path:
    return generated_run("batch-cli", GeneratorConfig(pages=400, crawls=6, seed=2))[1]


def test_train_registers_a_model_with_held_out_scores(run_dir: Path, tmp_path: Path) -> None:
    registry = tmp_path / "models"
    result = CliRunner().invoke(
        app,
        [
            "train",
            str(run_dir),
            "--registry",
            str(registry),
            "--kind",
            "hgb",
            "--feature-set",
            "LBLA",
            "--max-rows",
            "1500",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "registered link/000001" in result.output and "yield_share_10" in result.output
    art = ModelRegistry(registry).load("link")
    assert art.meta["kind"] == "hgb" and art.meta["training"]["feature_set"] == "LBLA"
    assert art.meta["training"]["rows_fitted"] == 1500
    assert 0 <= art.meta["scores"]["yield_share_10"] <= 1
    assert "nnl-av_yield_share_10" in art.meta["scores"]


def test_train_default_registry_from_settings(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOKAROUND_REGISTRY_DIR", str(tmp_path / "env-models"))
    result = CliRunner().invoke(
        app, ["train", str(run_dir), "--kind", "negbin", "--holdout-crawls", "0"]
    )
    assert result.exit_code == 0, result.output
    assert ModelRegistry(tmp_path / "env-models").latest() == "000001"


def test_train_rejects_unknown_kind_and_feature_set(run_dir: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["train", str(run_dir), "--registry", str(tmp_path), "--kind", "x"])
    assert r.exit_code != 0 and "unknown kind" in r.output
    r = CliRunner().invoke(
        app, ["train", str(run_dir), "--registry", str(tmp_path), "--feature-set", "NOPE"]
    )
    assert r.exit_code != 0 and "unknown feature set" in r.output


def test_experiment_report(run_dir: Path, tmp_path: Path) -> None:
    config = ExperimentConfig(
        grid_trees=5,
        grid_rows=1500,
        ranking_rows=1500,
        ranking_trees=10,
        ngboost_rows=500,
        ngboost_estimators=10,
        histories=(0, 1, 8),
        feature_sets=("SP", "LBLA"),
        importance_rows=300,
        importance_repeats=1,
    )
    result = run_experiment(load_rows(run_dir), tmp_path / "exp", config)
    md = result.markdown.read_text()
    for heading in (
        "NL classification by history size",
        "LCR regression",
        "Ranking comparison",
        "Count models",
        "Permutation importance",
    ):
        assert heading in md
    html = result.html.read_text()
    assert "data:image/png;base64," in html and "nan" not in html.lower().split("<img")[0]
    nl = result.tables["nl_classification"]
    assert set(nl[nl["group"] == "history"]["history"]) == {0, 1, 8}
    ranking = result.tables["ranking"]
    assert {
        "extratrees",
        "ngboost",
        "hgb",
        "negbin",
        "hurdle",
        "nnl-pr",
        "nnl-av",
        "ccr",
        "lbla",
        "random",
        "oracle",
    } <= set(ranking["ranking"])
    assert set(result.tables["count_models"]["model"]) == {
        "extratrees",
        "ngboost",
        "hgb",
        "negbin",
        "hurdle",
    }
    for name in (
        "nl_classification",
        "lcr_regression",
        "ranking",
        "count_models",
        "calibration",
        "importance",
    ):
        assert (tmp_path / "exp" / f"{name}.csv").exists()
    assert json.loads((tmp_path / "exp" / "experiment.json").read_text())["config"]


def test_experiment_command(run_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "experiment",
            "--run",
            str(run_dir),
            "--out",
            str(tmp_path / "e"),
            "--grid-trees",
            "3",
            "--grid-rows",
            "800",
            "--models",
            "hgb",
            "--quick",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "yield@10%" in result.output and (tmp_path / "e" / "experiment.html").exists()
    # the run's summary.json names its events file: --quick adds SP+semantic to both tables
    for table in ("nl_classification", "lcr_regression"):
        sets = set(pd.read_csv(tmp_path / "e" / f"{table}.csv")["feature_set"])
        assert {"SP", "SP+semantic", "LBLA"} <= sets, table
    assert "SP+semantic" in (tmp_path / "e" / "experiment.md").read_text()
