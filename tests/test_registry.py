"""Model registry: versioned artifacts, verification on load, hot reload by the watcher."""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from batch.models import LinkModel
from batch.registry import (
    DEFAULT_POLL_SECONDS,
    ArtifactRefused,
    ModelRegistry,
    ModelWatcher,
    _signature,
)
from streams.scorers import build_scorer

FEATURES = ["dp_new_internal_1", "dp_new_external_1", "sp_content_size"]


def _model(seed: int = 0) -> LinkModel:
    rng = np.random.default_rng(seed)
    X = rng.random((300, 3))
    Y = rng.poisson(np.column_stack([3 * X[:, 0], X[:, 1]]))
    return LinkModel("hgb", n_estimators=10, random_state=seed).fit(
        X, Y, feature_names=FEATURES, interval_days=np.full(300, 7.0)
    )


def _register(reg: ModelRegistry, seed: int = 0):
    return reg.register(_model(seed), training={"rows": 300}, scores={"yield_share_10": 0.5})


def _write_signed(reg: ModelRegistry, path: Path, meta: dict) -> None:
    """Rewrite meta.json as the key's holder would (re-signed): what the checks after the
    signature see."""
    model_bytes = (path.parent / "model.pkl").read_bytes()
    meta["hmac"] = _signature(reg.key, model_bytes, meta)
    path.write_text(json.dumps(meta))


def test_round_trip(tmp_path: Path) -> None:
    reg = ModelRegistry(tmp_path)
    model = _model()
    art = reg.register(model, training={"rows": 300, "pages": 30}, scores={"yield": 0.4})
    assert art.version == "000001" and reg.versions() == ["000001"] and reg.latest() == "000001"
    loaded = reg.load("link", required_features=set(FEATURES) | {"extra"})
    assert loaded.version == "000001"
    X = np.random.default_rng(1).random((20, 3))
    X[0, 1] = np.nan
    np.testing.assert_array_equal(loaded.model.predict(X).internal, model.predict(X).internal)
    meta = json.loads((tmp_path / "link" / "000001" / "meta.json").read_text())
    assert meta["version"] == "000001" and meta["kind"] == "hgb"
    assert datetime.fromisoformat(meta["created_at"]).tzinfo is not None
    assert meta["features"] == FEATURES
    assert {"sklearn", "ngboost", "numpy", "python"} <= set(meta["libraries"])
    assert meta["training"]["pages"] == 30 and meta["scores"]["yield"] == 0.4
    assert len(meta["sha256"]) == 64 and meta["interval_days"] == 7.0
    second = _register(reg, seed=1)
    assert second.version == "000002" and reg.latest() == "000002"
    assert reg.versions() == ["000001", "000002"]
    assert reg.load("link", "000001").version == "000001"
    assert not [p for p in (tmp_path / "link").iterdir() if p.name.startswith(".")]


def test_tampered_pickle_is_refused(tmp_path: Path) -> None:
    reg = ModelRegistry(tmp_path)
    _register(reg)
    with open(tmp_path / "link" / "000001" / "model.pkl", "ab") as f:
        f.write(b"\x00")
    with pytest.raises(ArtifactRefused, match="HMAC mismatch"):
        reg.load()


@pytest.mark.parametrize("library", ["sklearn", "numpy", "ngboost"])
def test_incompatible_versions_are_refused(tmp_path: Path, library: str) -> None:
    reg = ModelRegistry(tmp_path)
    _register(reg)
    path = tmp_path / "link" / "000001" / "meta.json"
    meta = json.loads(path.read_text())
    meta["libraries"][library] = "0.1.0"
    _write_signed(reg, path, meta)
    with pytest.raises(ArtifactRefused, match=rf"made with {library} 0\.1\.0"):
        reg.load()


def test_patch_versions_are_compatible(tmp_path: Path) -> None:
    reg = ModelRegistry(tmp_path)
    _register(reg)
    path = tmp_path / "link" / "000001" / "meta.json"
    meta = json.loads(path.read_text())
    major, minor = meta["libraries"]["numpy"].split(".")[:2]
    meta["libraries"]["numpy"] = f"{major}.{minor}.999"
    _write_signed(reg, path, meta)
    assert reg.load().version == "000001"


def test_missing_features_are_refused(tmp_path: Path) -> None:
    reg = ModelRegistry(tmp_path)
    _register(reg)
    with pytest.raises(ArtifactRefused, match="sp_content_size"):
        reg.load(required_features={"dp_new_internal_1", "dp_new_external_1"})


def test_nothing_registered(tmp_path: Path) -> None:
    reg = ModelRegistry(tmp_path)
    assert reg.versions() == [] and reg.latest() is None
    with pytest.raises(ArtifactRefused, match="no model"):
        reg.load()
    assert ModelWatcher(reg, "link").current() is None


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_watcher_picks_up_new_versions_and_keeps_the_old_one_when_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reg = ModelRegistry(tmp_path)
    clock = Clock()
    watcher = ModelWatcher(reg, "link", set(FEATURES), poll_seconds=30, clock=clock)
    assert watcher.current() is None
    _register(reg)
    assert watcher.current() is None  # polled less than 30 s ago
    clock.t = 31
    first = watcher.current()
    assert first is not None and first.version == "000001"
    _register(reg, seed=1)
    clock.t = 40
    assert watcher.current() is first  # not yet
    clock.t = 62
    assert watcher.current().version == "000002" and watcher.loads == 2
    # a bad third version: tampered pickle
    _register(reg, seed=2)
    with open(tmp_path / "link" / "000003" / "model.pkl", "ab") as f:
        f.write(b"junk")
    clock.t = 100
    with caplog.at_level(logging.WARNING, logger="batch.registry"):
        kept = watcher.current()
    assert kept.version == "000002" and watcher.refused == 1
    assert "HMAC mismatch" in caplog.text and "keeping link/000002" in caplog.text
    clock.t = 200
    assert watcher.current().version == "000002" and watcher.refused == 1  # not retried
    # a fourth version needing a feature the pipeline lacks is refused too
    other = LinkModel("hgb", n_estimators=5).fit(
        np.random.default_rng(0).random((100, 1)), np.ones((100, 2)), feature_names=["novel"]
    )
    reg.register(other, training={}, scores={})
    clock.t = 300
    assert watcher.current().version == "000002" and watcher.refused == 2
    assert "novel" in (watcher.last_error or "")
    _register(reg, seed=3)  # a good fifth one is taken
    clock.t = 400
    assert watcher.current().version == "000005"


#: Run in a fresh interpreter: the training libraries the settings must not import.
_SETTINGS_PROBE = """
import sys
from batch.registry import DEFAULT_POLL_SECONDS
from streams.settings import Settings
assert Settings().registry_poll_seconds == DEFAULT_POLL_SECONDS
print(sorted(m for m in ("sklearn", "pandas", "scipy", "batch.models") if m in sys.modules))
"""


def test_the_poll_period_has_one_default_that_the_settings_read_without_training_libraries() -> (
    None
):
    """`DEFAULT_POLL_SECONDS` is the watcher's default, `build_scorer`'s and the setting's; the
    settings read it from `batch.registry` without importing scikit-learn, pandas or SciPy
    (every command loads the settings)."""
    for function in (ModelWatcher, build_scorer):
        assert (
            inspect.signature(function).parameters["poll_seconds"].default == DEFAULT_POLL_SECONDS
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOKAROUND_")}
    done = subprocess.run(
        [sys.executable, "-c", _SETTINGS_PROBE],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
