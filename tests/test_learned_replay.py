"""Learned scorers end to end in the replay: a registered batch model is used and named in
every priority; a tampered one stops the replay with a clear message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from batch.generate import GeneratorConfig
from batch.registry import ModelRegistry
from batch.train import train_and_register
from streams.cli import app
from streams.replay import read_priorities, replay


@pytest.fixture(scope="module")
def trained(generated_run) -> tuple[Path, Path, str]:
    events, run = generated_run("learned", GeneratorConfig(pages=400, crawls=5, seed=4), "lbla")
    registry = run.parent / "models"
    result = train_and_register(run, ModelRegistry(registry), kind="hgb")
    return events, registry, result.artifact.version


def test_batch_and_ensemble_replays_use_the_registered_model(trained, tmp_path) -> None:
    events, registry, version = trained
    for scorer in ("batch", "ensemble"):
        replay(events, tmp_path / scorer, scorer=scorer, registry_dir=registry, progress=False)
        updates = list(read_priorities(tmp_path / scorer))
        assert updates and all(u["scorer"]["models"]["batch"] == version for u in updates)
        assert all(u["scorer"]["name"] == scorer for u in updates)
        assert sum("model" in u["reasons"] for u in updates) == len(updates)
    online = [u["scorer"]["models"] for u in read_priorities(tmp_path / "ensemble")]
    assert all("online" in m for m in online)


def test_a_tampered_model_stops_the_replay_with_a_clear_message(trained, tmp_path) -> None:
    events, registry, _ = trained
    bad = tmp_path / "models"
    bad.mkdir()
    shutil.copytree(registry, bad, dirs_exist_ok=True)
    pickle_file = next(bad.rglob("model.pkl"))
    pickle_file.write_bytes(pickle_file.read_bytes() + b"tampered")
    result = CliRunner().invoke(
        app,
        [
            "replay",
            str(events),
            "--out",
            str(tmp_path / "run"),
            "--scorer",
            "batch",
            "--registry",
            str(bad),
            "--quiet",
        ],
    )
    assert result.exit_code == 2
    assert "checksum" in result.output.lower()
