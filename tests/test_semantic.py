"""SP+semantic: the page's embedding joined onto the replay's feature rows (batch side only)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from batch.datasets import (
    add_semantic_columns,
    feature_columns,
    resolve_feature_set,
    training_set,
)
from batch.evaluate import load_rows
from batch.experiment import run_events_file, semantic_rows
from batch.generate import GeneratorConfig, write_events
from online.embedding import HashingTextEmbedder
from online.events import parse_event
from streams.replay import replay

SEM16 = [f"sem_{j}" for j in range(16)]


#: 2026-01-01T00:00:00Z: fetch times must lie after 1990 (the contract's bound).
T0 = 1_767_225_600


def _crawl(base: Path, content: str, crawls: int = 3) -> tuple[Path, Path]:
    events = base / f"{content}.jsonl.gz"
    config = GeneratorConfig(pages=200, crawls=crawls, seed=5, content=content)
    write_events(events, config, progress=False)
    replay(events, base / f"run-{content}", progress=False)
    return events, base / f"run-{content}"


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _crawl(tmp_path_factory.mktemp("semantic"), "embedding")


def _independent_vectors(events: Path, df: pd.DataFrame) -> np.ndarray:
    """Each row's unit embedding, looked up by parse_event (its own URL normalisation)."""
    by_key: dict[tuple[str, int], np.ndarray] = {}
    with gzip.open(events, "rb") as fh:
        for line in fh:
            ev = parse_event(line)
            if ev.vector is not None:
                v = ev.vector.astype(np.float64)
                by_key.setdefault((ev.url, round(ev.timestamp * 1000)), v / np.linalg.norm(v))
    ms = (df["fetched_at"] - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    return np.stack([by_key[(u, int(t))] for u, t in zip(df["url"], ms, strict=True)])


def test_semantic_columns_join_each_fetch_to_its_own_embedding(embedded) -> None:
    events, run = embedded
    rows = load_rows(run)
    df = add_semantic_columns(rows, events, components=16, seed=0)
    assert list(df.columns[: len(rows.columns)]) == list(rows.columns) and len(df) == len(rows)
    assert [c for c in df.columns if c.startswith("sem_")] == SEM16
    # the generator's failed fetches (404) carry no embedding: NaN there, values elsewhere
    failed = (df["status"] >= 300).to_numpy()
    assert 0 < failed.sum() < 10
    assert df.loc[failed, SEM16].isna().all().all()
    df = df.loc[~failed].reset_index(drop=True)
    sem = df[SEM16].to_numpy(np.float64)
    assert np.isfinite(sem).all() and sem.std(axis=0).min() > 0
    # PCA is affine in the vector: the sem columns must be an exact affine map of each row's
    # own embedding, which a shifted or shuffled join would break
    V = np.column_stack([_independent_vectors(events, df), np.ones(len(df))])
    coef, *_ = np.linalg.lstsq(V, sem, rcond=None)
    assert np.abs(V @ coef - sem).max() < 1e-3
    shuffled = np.random.default_rng(0).permutation(len(df))
    coef, *_ = np.linalg.lstsq(V, sem[shuffled], rcond=None)
    assert np.abs(V @ coef - sem[shuffled]).max() > 0.1
    # seeded and idempotent
    again = add_semantic_columns(df, events, components=16, seed=0)
    np.testing.assert_array_equal(again[SEM16].to_numpy(), sem.astype(np.float32))


def test_feature_set_sp_semantic_resolves(embedded) -> None:
    events, run = embedded
    rows = load_rows(run)
    assert resolve_feature_set("SP+semantic") == "SP+semantic"
    with pytest.raises(ValueError, match="run with the events file to add semantic columns"):
        feature_columns(rows.columns, "SP+semantic")
    df = add_semantic_columns(rows, events, components=4)
    cols = feature_columns(df.columns, "SP+semantic")
    assert cols == [*feature_columns(df.columns, "SP"), "sem_0", "sem_1", "sem_2", "sem_3"]
    ts = training_set(df, "SP+semantic")
    assert ts.feature_names == cols and ts.X.shape[1] == len(cols)
    assert "sem_0" not in feature_columns(df.columns, "SP+SN+DP+DN")


def test_no_embedding_no_text_gives_nan(tmp_path: Path) -> None:
    events, run = _crawl(tmp_path, "none")
    df = add_semantic_columns(load_rows(run), events, components=8)
    assert [c for c in df.columns if c.startswith("sem_")] == SEM16[:8]
    assert df[SEM16[:8]].isna().all().all()


def test_text_fallback_url_normalisation_duplicates_and_gaps(tmp_path: Path) -> None:
    events = tmp_path / "tiny.jsonl"
    text_vec = HashingTextEmbedder(dim=192).embed("cheap flights to rome")
    assert text_vec is not None
    raw = text_vec.astype(np.float64)
    raw[3] += 1.0
    emb = (2 * raw).tolist()  # not a unit vector: the replay normalises it
    lines = [
        {
            "url": "HTTPS://Example.com/a#x",
            "fetched_at": T0 + 1000,
            "outlinks": [],
            "embedding": emb,
        },
        {
            "url": "https://example.com/a",
            "fetched_at": T0 + 1000,
            "outlinks": [],
            "text": "cheap flights to rome",
        },
        {
            "url": "https://example.com/b",
            "fetched_at": T0 + 1000.5,
            "outlinks": [],
            "text": "cheap flights to rome",
        },
        {"url": "https://example.com/c", "fetched_at": T0 + 1001, "outlinks": []},
        {"url": "ftp://bad", "fetched_at": T0 + 1001, "outlinks": []},
    ]
    events.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    at = pd.to_datetime(
        [T0 * 1000 + ms for ms in (1000_000, 1000_500, 1001_000, 2000_000)], unit="ms", utc=True
    )
    df = pd.DataFrame(
        {"url": [f"https://example.com/{p}" for p in "abcd"], "fetched_at": at.as_unit("ms")}
    )
    out = add_semantic_columns(df, events, components=3)
    sem = out[["sem_0", "sem_1", "sem_2"]].to_numpy()
    # two vectors (a: the first event's embedding, b: text) -> two PCA components at most
    assert np.isfinite(sem[:2, :2]).all() and np.isnan(sem[:2, 2]).all()
    assert np.isnan(sem[2:]).all()  # c: no embedding nor text; d: no such event
    # two points project to ±half their distance: the vectors behind them are the first
    # event's embedding as a unit vector and b's embedded text (had the duplicate's text, the
    # same as b's, been used, both rows would sit at 0)
    half = np.linalg.norm(raw / np.linalg.norm(raw) - text_vec) / 2
    assert half > 0.1
    assert sem[0, 0] == pytest.approx(-sem[1, 0], abs=1e-5)
    assert abs(sem[0, 0]) == pytest.approx(half, abs=1e-5)


def test_experiment_finds_the_events_file_or_skips(embedded, tmp_path: Path) -> None:
    events, run = embedded
    assert run_events_file(run) == events
    moved = tmp_path / "run"
    moved.mkdir()
    summary = json.loads((run / "summary.json").read_text())
    summary["events_file"] = str(tmp_path / "gone.jsonl.gz")
    (moved / "summary.json").write_text(json.dumps(summary))
    assert run_events_file(moved) is None
    notes: list[str] = []
    rows = load_rows(run)
    assert semantic_rows(rows, None, note=notes.append) is rows and "SP+semantic" in notes[0]
    assert "sem_0" in semantic_rows(rows, events).columns


def test_experiment_skips_sp_semantic_without_columns(tmp_path: Path) -> None:
    from batch.experiment import ExperimentConfig, run_experiment

    _, run = _crawl(tmp_path, "embedding", crawls=5)  # LCR needs 2 held-out intervals
    config = ExperimentConfig(
        holdout_crawls=2,
        grid_trees=3,
        grid_rows=300,
        ranking_rows=300,
        ranking_trees=3,
        histories=(0,),
        feature_sets=("SP", "SP+semantic"),
        models=("hgb",),
        importance_rows=50,
        importance_repeats=1,
    )
    notes: list[str] = []
    result = run_experiment(load_rows(run), tmp_path / "x", config, step=notes.append)
    assert any("skipping SP+semantic" in n for n in notes)
    assert set(result.tables["nl_classification"]["feature_set"].dropna()) == {
        "SP+SN+DP+DN/0",
        "SP",
    }
    assert "SP+semantic" not in set(result.tables["lcr_regression"]["feature_set"])
