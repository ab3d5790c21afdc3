"""Learned scorers end to end in the replay: a registered batch model is used and named where
it carries weight, the batch model refreshed from the stream takes over at epochs and each
version is registered in the run directory; a tampered model stops the replay with a clear
message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from batch.generate import GeneratorConfig
from batch.registry import ModelRegistry
from batch.train import train_and_register
from online import learned
from streams.cli import app
from streams.replay import read_priorities, replay


@pytest.fixture(scope="module")
def trained(generated_run) -> tuple[Path, Path, str]:
    events, run = generated_run("learned", GeneratorConfig(pages=400, crawls=5, seed=4), "lbla")
    registry = run.parent / "models"
    result = train_and_register(run, ModelRegistry(registry), kind="hgb")
    return events, registry, result.artifact.version


def test_the_batch_scorer_uses_the_registered_model_throughout_without_refresh(
    trained, tmp_path
) -> None:
    events, registry, version = trained
    summary = replay(
        events, tmp_path / "batch", scorer="batch", registry_dir=registry, refresh=False,
        progress=False,
    )  # fmt: skip
    updates = list(read_priorities(tmp_path / "batch"))
    assert updates and all(u["scorer"]["models"]["batch"] == version for u in updates)
    assert all(u["scorer"]["name"] == "batch" for u in updates)
    assert summary.batch_models == [] and not (tmp_path / "batch" / "models").exists()


def test_refreshed_models_take_over_from_the_registered_one_and_are_registered(
    trained, tmp_path
) -> None:
    events, registry, version = trained
    run = tmp_path / "batch"
    summary = replay(events, run, scorer="batch", registry_dir=registry, progress=False)
    named = [u["scorer"]["models"].get("batch") for u in read_priorities(run)]
    assert summary.batch_models, "a 400-page crawl over 5 rounds gives labels enough to refit"
    # the registered model until the first refresh took over, then the refreshed ones in order
    first = named.index(summary.batch_models[0])
    assert set(named[:first]) <= {version, None} and version in named[:first]
    refreshed = [v for v in named[first:] if v is not None]
    assert refreshed == sorted(refreshed) and set(refreshed) <= set(summary.batch_models)
    # each refreshed version is in the run directory's registry, with what it was fitted on
    kept = ModelRegistry(run / "models")
    assert len(kept.versions("link-refresh")) == len(summary.batch_models)
    meta = kept.meta("link-refresh")
    assert meta["training"]["rows"] > 0 and meta["training"]["refresh"] == summary.batch_models[-1]


def test_the_ensemble_names_its_models_where_they_carry_weight(trained, tmp_path) -> None:
    events, registry, _ = trained
    replay(events, tmp_path / "ensemble", scorer="ensemble", registry_dir=registry, progress=False)
    for update in read_priorities(tmp_path / "ensemble"):
        models = update["scorer"]["models"]
        assert set(models) <= {"online", "batch"}
        assert ("model" in update["reasons"]) <= bool(models)


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
    assert "hmac mismatch" in result.output.lower()


def test_a_refresh_that_fails_loses_no_event_and_is_logged(
    trained, tmp_path, monkeypatch, caplog
) -> None:
    """Fitting or registering the refreshed model is no event's fault: when it raises, every
    event is still scored (by the model before it), the error is logged with its traceback and
    counted, and no version is claimed for the failed fit."""
    import streams.scorers

    events, _, _ = trained
    clean = replay(events, tmp_path / "clean", scorer="ensemble", progress=False)
    assert clean.batch_models and clean.batch_model_failures == 0

    def broken(*args, **kwargs):
        raise ValueError("injected: the fit fails")

    monkeypatch.setattr(streams.scorers, "fit_rate_model", broken)
    with caplog.at_level("ERROR"):
        summary = replay(events, tmp_path / "broken", scorer="ensemble", progress=False)
    assert summary.applied == clean.applied and summary.rejected == clean.rejected == 0
    assert summary.batch_models == [] and summary.batch_model_failures >= 1
    failed = [r for r in caplog.records if "failed to refresh" in r.getMessage()]
    assert failed and "injected: the fit fails" in failed[0].getMessage() and failed[0].exc_info
    monkeypatch.undo()

    def unwritable(*args, **kwargs):
        raise OSError("injected: the registry is read-only")

    monkeypatch.setattr(ModelRegistry, "register", unwritable)
    summary = replay(events, tmp_path / "unregistered", scorer="ensemble", progress=False)
    # the refreshed models were in use all the same: the same priorities as the clean run
    assert summary.batch_models == clean.batch_models
    assert summary.batch_model_failures == len(clean.batch_models)
    strip = lambda run: [{**u, "scored_at": None} for u in read_priorities(run)]  # noqa: E731
    assert strip(tmp_path / "unregistered") == strip(tmp_path / "clean")


def test_an_epoch_worked_out_in_chunks_scores_as_one_worked_out_whole(
    trained, tmp_path, monkeypatch
) -> None:
    """An epoch's rows go through the models a chunk at a time (memory at a million pages);
    the scores must be those of the rows taken whole, to the bit."""
    events, registry, _ = trained

    def scores(name: str) -> list[tuple]:
        run = tmp_path / name
        replay(events, run, scorer="ensemble", registry_dir=registry, progress=False)
        return [(u["url"], u["fetched_at"], u["score"], u["p_new"]) for u in read_priorities(run)]

    whole = scores("whole")
    monkeypatch.setattr(learned, "EPOCH_CHUNK", 7)
    assert scores("chunks") == whole
