"""A file-system model registry: versioned artifacts that running scorers pick up.

Layout (``root`` is a directory, e.g. a shared volume)::

    root/<name>/000001/model.pkl     the pickled model
    root/<name>/000001/meta.json     version, created_at, kind, features, library versions,
                                     training data summary, held-out scores, sha256 of model.pkl
    root/<name>/LATEST               the version scorers should use

`ModelRegistry.register` builds a version in a staging directory, renames it into place (a
version directory is complete or absent) and only then replaces ``LATEST`` atomically.
`ModelRegistry.load` refuses, with `ArtifactRefused` naming the problem, an artifact whose
pickle does not match its checksum (checked BEFORE unpickling), that was made with another
major.minor of scikit-learn, NGBoost or NumPy than the running ones, or that needs features the
running pipeline does not produce. `ModelWatcher` polls ``LATEST`` and swaps models without a
restart, keeping the previous one when a new one is refused.

>>> import tempfile
>>> from batch.models import LinkModel
>>> X = np.random.default_rng(0).random((200, 2))
>>> model = LinkModel("hgb", n_estimators=5).fit(X, np.c_[X[:, 0] > .5, X[:, 1] > .8],
...                                               feature_names=["a", "b"])
>>> reg = ModelRegistry(Path(tempfile.mkdtemp()))
>>> reg.register(model, training={"rows": 200}, scores={}).version
'000001'
>>> reg.load("link", required_features={"a"})
Traceback (most recent call last):
...
batch.registry.ArtifactRefused: link/000001 needs features the pipeline does not produce: ['b']
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from batch.models import library_versions

__all__ = [
    "CHECKED_LIBRARIES",
    "Artifact",
    "ArtifactRefused",
    "ModelRegistry",
    "ModelWatcher",
]

log = logging.getLogger(__name__)

MODEL_FILE = "model.pkl"
META_FILE = "meta.json"
LATEST_FILE = "LATEST"
#: libraries whose major.minor must match between the artifact and the running process
CHECKED_LIBRARIES = ("sklearn", "ngboost", "numpy")


class ArtifactRefused(Exception):
    """An artifact that must not be used, and why."""


@dataclass(frozen=True)
class Artifact:
    """A loaded (verified) model and its metadata."""

    name: str
    version: str
    model: Any = field(repr=False)
    meta: dict[str, Any] = field(repr=False)

    @property
    def id(self) -> str:
        return f"{self.name}/{self.version}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(str(version).split(".")[:2])


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


class ModelRegistry:
    """Versioned model artifacts under ``root`` (see the module docstring)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def _dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad model name {name!r}")
        return self.root / name

    def versions(self, name: str = "link") -> list[str]:
        """Registered versions of ``name``, oldest first."""
        base = self._dir(name)
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and p.name.isdigit())

    def latest(self, name: str = "link") -> str | None:
        """The version ``LATEST`` points at (None if nothing is registered)."""
        try:
            return (self._dir(name) / LATEST_FILE).read_text().strip() or None
        except FileNotFoundError:
            return None

    def register(
        self,
        model: Any,
        *,
        name: str = "link",
        training: dict[str, Any],
        scores: dict[str, Any],
        set_latest: bool = True,
    ) -> Artifact:
        """Write a new version of ``name`` and (by default) point ``LATEST`` at it."""
        base = self._dir(name)
        base.mkdir(parents=True, exist_ok=True)
        staging = base / f".staging-{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            model_path = staging / MODEL_FILE
            with open(model_path, "wb") as f:
                pickle.dump(model, f, protocol=pickle.HIGHEST_PROTOCOL)
                f.flush()
                os.fsync(f.fileno())
            meta: dict[str, Any] = {
                "name": name,
                "version": None,
                "created_at": datetime.now(UTC).isoformat(),
                "kind": getattr(model, "kind", type(model).__name__),
                "class": f"{type(model).__module__}.{type(model).__qualname__}",
                "features": list(getattr(model, "feature_names_", [])),
                "interval_days": getattr(model, "interval_days_", None),
                "libraries": getattr(model, "versions_", None) or library_versions(),
                "training": training,
                "scores": scores,
                "sha256": _sha256(model_path),
                "size_bytes": model_path.stat().st_size,
            }
            existing = self.versions(name)
            number = int(existing[-1]) + 1 if existing else 1
            while True:  # claim the next free number; a rename never merges into a version
                version = f"{number:06d}"
                meta["version"] = version
                (staging / META_FILE).write_text(json.dumps(_jsonable(meta), indent=2))
                try:
                    os.rename(staging, base / version)
                    break
                except OSError:
                    if not (base / version).exists():
                        raise
                    number += 1
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if set_latest:
            self.set_latest(name, version)
        return Artifact(name, version, model, meta)

    def set_latest(self, name: str, version: str) -> None:
        """Point ``LATEST`` at ``version`` atomically (a reader sees the old or the new)."""
        base = self._dir(name)
        if not (base / version).is_dir():
            raise ValueError(f"{name}/{version} is not registered")
        tmp = base / f".LATEST-{uuid.uuid4().hex}"
        tmp.write_text(version + "\n")
        os.replace(tmp, base / LATEST_FILE)

    def meta(self, name: str = "link", version: str | None = None) -> dict[str, Any]:
        version = version or self.latest(name)
        if version is None:
            raise ArtifactRefused(f"no model {name!r} registered under {self.root}")
        path = self._dir(name) / version / META_FILE
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise ArtifactRefused(f"{name}/{version}: no {META_FILE} at {path}") from None
        except json.JSONDecodeError as exc:
            raise ArtifactRefused(f"{name}/{version}: unreadable {META_FILE}: {exc}") from None

    def load(
        self,
        name: str = "link",
        version: str | None = None,
        *,
        required_features: Iterable[str] | None = None,
        running_versions: dict[str, str] | None = None,
    ) -> Artifact:
        """The verified artifact (``LATEST`` by default); `ArtifactRefused` says what is wrong.

        ``required_features``: the features the running pipeline produces; the model's
        features must all be among them.
        """
        meta = self.meta(name, version)
        version = str(meta.get("version") or version)
        label = f"{name}/{version}"
        path = self._dir(name) / version / MODEL_FILE
        if not path.exists():
            raise ArtifactRefused(f"{label}: {MODEL_FILE} is missing")
        digest = _sha256(path)
        if digest != meta.get("sha256"):
            raise ArtifactRefused(
                f"{label}: checksum mismatch: {MODEL_FILE} has sha256 {digest[:12]}..., "
                f"meta.json records {str(meta.get('sha256'))[:12]}... (corrupted or tampered)"
            )
        running = running_versions or library_versions()
        built = meta.get("libraries") or {}
        for lib in CHECKED_LIBRARIES:
            have, made = running.get(lib), built.get(lib)
            if made is None or have is None or _major_minor(have) != _major_minor(made):
                raise ArtifactRefused(
                    f"{label}: made with {lib} {made}, running {have}: "
                    f"major.minor must match to unpickle safely; retrain with `lookaround train`"
                )
        features = list(meta.get("features") or [])
        if required_features is not None:
            available = set(required_features)
            missing = [f for f in features if f not in available]
            if missing:
                raise ArtifactRefused(
                    f"{label} needs features the pipeline does not produce: {missing[:10]}"
                    + (f" (and {len(missing) - 10} more)" if len(missing) > 10 else "")
                )
        try:
            with open(path, "rb") as f:
                model = pickle.load(f)
        except Exception as exc:  # a matching checksum but an unloadable pickle
            raise ArtifactRefused(f"{label}: cannot unpickle {MODEL_FILE}: {exc!r}") from exc
        names = getattr(model, "feature_names_", None)
        if names is not None and list(names) != features:
            raise ArtifactRefused(f"{label}: meta.json's feature list differs from the model's")
        return Artifact(name, version, model, meta)


class ModelWatcher:
    """The current model of ``name`` for a running scorer, refreshed without a restart.

    `current` reads the small ``LATEST`` file at most every ``poll_seconds`` (by ``clock``),
    loads a new version when it changes, and keeps the previous model (logging a warning and
    counting it in ``refused``) when the new one is refused. A refused version is not retried
    until ``LATEST`` changes again.
    """

    def __init__(
        self,
        registry: ModelRegistry,
        name: str = "link",
        available_features: set[str] | None = None,
        poll_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.name = name
        self.available_features = available_features
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.refused = 0
        self.loads = 0
        self.last_error: str | None = None
        self._artifact: Artifact | None = None
        self._seen: str | None = None
        self._checked_at: float | None = None

    @property
    def version(self) -> str | None:
        return None if self._artifact is None else self._artifact.version

    def current(self) -> Artifact | None:
        now = self.clock()
        if self._checked_at is not None and now - self._checked_at < self.poll_seconds:
            return self._artifact
        self._checked_at = now
        latest = self.registry.latest(self.name)
        if latest is None or latest == self._seen:
            return self._artifact
        self._seen = latest
        try:
            self._artifact = self.registry.load(
                self.name, latest, required_features=self.available_features
            )
            self.loads += 1
            self.last_error = None
            log.info("model %s/%s loaded", self.name, latest)
        except ArtifactRefused as exc:
            self.refused += 1
            self.last_error = str(exc)
            kept = self._artifact.id if self._artifact else "none"
            log.warning("model refused, keeping %s: %s", kept, exc)
        return self._artifact
