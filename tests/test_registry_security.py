"""Whoever can write the model registry cannot run code in a scorer (issue 15, item 4).

Each test plants what an attacker with write access to the registry (not the key) could, and
checks that a marker file the payload would create never appears.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import shutil
from pathlib import Path

import pytest

from batch.registry import ArtifactRefused, ModelRegistry, ModelWatcher, registry_key
from tests.test_registry import FEATURES, _model, _register

KEY = b"the operators' secret"


class _Payload:
    """Unpickling this runs a shell command that creates ``marker`` (stands in for any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _plant(version_dir: Path, marker: Path) -> None:
    """Replace the model with a code-running pickle and fix meta.json's sha256 to match."""
    evil = pickle.dumps(_Payload(marker))
    (version_dir / "model.pkl").write_bytes(evil)
    meta_path = version_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["sha256"] = hashlib.sha256(evil).hexdigest()
    meta["size_bytes"] = len(evil)
    meta_path.write_text(json.dumps(meta))


def test_tampered_artifact_with_matching_sha256_does_not_execute(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    reg = ModelRegistry(tmp_path / "registry", key=KEY)
    _register(reg)
    _plant(tmp_path / "registry" / "link" / "000001", marker)
    with pytest.raises(ArtifactRefused, match="HMAC mismatch"):
        reg.load()
    watcher = ModelWatcher(reg, "link", set(FEATURES))
    assert watcher.current() is None and watcher.refused == 1
    assert not marker.exists(), "the planted pickle ran"


def test_a_signature_copied_from_another_artifact_does_not_match(tmp_path: Path) -> None:
    """The HMAC covers the model's bytes and its metadata: an attacker who can read a valid
    signature cannot move it onto their own pickle."""
    marker = tmp_path / "pwned"
    reg = ModelRegistry(tmp_path, key=KEY)
    good = _register(reg)
    _plant(tmp_path / "link" / "000001", marker)
    meta_path = tmp_path / "link" / "000001" / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["hmac"] == good.meta["hmac"]  # the valid signature is still there
    with pytest.raises(ArtifactRefused, match="HMAC mismatch"):
        reg.load()
    assert not marker.exists()


def test_other_key_and_no_key_are_refused_with_a_clear_message(tmp_path: Path) -> None:
    _register(ModelRegistry(tmp_path, key=KEY))
    with pytest.raises(ArtifactRefused, match="signed with another LOOKAROUND_REGISTRY_KEY"):
        ModelRegistry(tmp_path, key=b"another key").load()
    with pytest.raises(ArtifactRefused, match="no LOOKAROUND_REGISTRY_KEY is set"):
        ModelRegistry(tmp_path, key=None).load()
    assert ModelRegistry(tmp_path, key=KEY).load().version == "000001"


def test_unsigned_artifacts_are_never_loaded(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="batch.registry"):
        ModelRegistry(tmp_path, key=None).register(_model(), training={}, scores={})
    assert "registered unsigned" in caplog.text
    with pytest.raises(ArtifactRefused, match="unsigned"):
        ModelRegistry(tmp_path, key=KEY).load()


def test_key_comes_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LOOKAROUND_REGISTRY_KEY", "from-env")
    _register(ModelRegistry(tmp_path / "reg"))
    assert ModelRegistry(tmp_path / "reg", key=b"from-env").load().version == "000001"
    # without it: this user's own key, which the environment's artifacts do not match
    monkeypatch.delenv("LOOKAROUND_REGISTRY_KEY")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    with pytest.raises(ArtifactRefused, match=r"HMAC|signature|sign"):
        ModelRegistry(tmp_path / "reg").load()


def test_without_a_setting_the_users_own_key_is_made_and_kept(tmp_path: Path, monkeypatch) -> None:
    """One user training and replaying on one machine needs no set-up; the key is private."""
    monkeypatch.delenv("LOOKAROUND_REGISTRY_KEY")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    _register(ModelRegistry(tmp_path / "reg"))
    assert ModelRegistry(tmp_path / "reg").load().version == "000001"
    key_file = tmp_path / "config" / "lookaround" / "registry.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert len(key_file.read_text()) == 64
    # another user (another home) cannot load it, nor forge one it would load
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "other"))
    with pytest.raises(ArtifactRefused):
        ModelRegistry(tmp_path / "reg").load()


def test_no_key_at_all_loads_nothing(tmp_path: Path, monkeypatch) -> None:
    """No setting and nowhere to keep a key (a read-only container): nothing is loaded."""
    _register(ModelRegistry(tmp_path / "reg", key=b"some key"))
    monkeypatch.delenv("LOOKAROUND_REGISTRY_KEY")
    (tmp_path / "not-a-directory").write_text("")
    nowhere = tmp_path / "not-a-directory" / "lookaround" / "registry.key"
    monkeypatch.setattr("batch.registry.local_key_file", lambda: nowhere)
    assert registry_key() is None
    with pytest.raises(ArtifactRefused, match="no LOOKAROUND_REGISTRY_KEY"):
        ModelRegistry(tmp_path / "reg").load()


@pytest.mark.parametrize("latest", ["../../elsewhere/000007", "/tmp/000007", "000001/../.."])
def test_latest_escaping_the_registry_is_refused(tmp_path: Path, latest: str) -> None:
    """``LATEST`` pointing outside the registry is refused, even at an artifact signed with
    the right key (the attacker may have got one from elsewhere)."""
    marker = tmp_path / "pwned"
    root = tmp_path / "a" / "registry"
    reg = ModelRegistry(root, key=KEY)
    _register(reg)
    elsewhere = tmp_path / "a" / "elsewhere" / "000007"
    shutil.copytree(root / "link" / "000001", elsewhere)
    _plant(elsewhere, marker)
    (root / "link" / "LATEST").write_text(latest + "\n")
    with pytest.raises(ArtifactRefused, match="not a version number"):
        reg.load()
    watcher = ModelWatcher(reg, "link", set(FEATURES))
    assert watcher.current() is None and watcher.refused == 1
    assert "not a version number" in (watcher.last_error or "")
    assert not marker.exists()


def test_a_version_directory_linked_outside_the_registry_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    reg = ModelRegistry(root, key=KEY)
    _register(reg)
    outside = tmp_path / "outside"
    shutil.copytree(root / "link" / "000001", outside)
    (root / "link" / "000002").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ArtifactRefused, match="outside the registry"):
        reg.load("link", "000002")
    with pytest.raises(ValueError, match="outside the registry"):
        reg.set_latest("link", "000002")


def test_a_worker_starts_with_a_bad_latest_and_says_why(tmp_path: Path) -> None:
    """A tampered ``LATEST`` must not keep a worker from starting (a crash loop): the batch
    scorer's note says what is wrong and LBLA stands in."""
    from streams.scorers import missing_model

    reg = ModelRegistry(tmp_path, key=KEY)
    _register(reg)
    (tmp_path / "link" / "LATEST").write_text("../../elsewhere/000007\n")
    note = missing_model("batch", tmp_path)
    assert note is not None and "not a version number" in note and "LBLA stands in" in note
