"""A file-system model registry: versioned artifacts that running scorers pick up.

Layout (``root`` is a directory, e.g. a shared volume)::

    root/<name>/000001/model.pkl     the pickled model
    root/<name>/000001/meta.json     version, created_at, kind, features, library versions,
                                     training data summary, held-out scores, sha256 of model.pkl
    root/<name>/LATEST               the version scorers should use

`ModelRegistry.register` builds a version in a staging directory, renames it into place (a
version directory is complete or absent) and only then replaces ``LATEST`` atomically.

A pickle runs code when it is loaded, and a checksum beside the file it protects protects
nothing from someone who can write both. So every artifact is signed: ``meta.json`` holds an
HMAC-SHA256, under a secret key (``LOOKAROUND_REGISTRY_KEY``, the ``registry_key`` setting, the
same where models are trained and where they are served), of the model's bytes and the rest of
its metadata. `ModelRegistry.load` reads the model into memory, checks the HMAC of those very
bytes, and unpickles them only if it matches. Without ``LOOKAROUND_REGISTRY_KEY`` the key is the
user's own, made on first use in ``~/.config/lookaround/registry.key`` (so one user training and
replaying on one machine needs no set-up; a deployment shares one key through the setting).
Without any key nothing is loaded (the worker scores without the batch model, as when none is
registered, and says why); an artifact registered without a key carries no signature and is
refused by every loader.

`ModelRegistry.load` also refuses, with `ArtifactRefused` naming the problem, a version that
is not a version directory inside the registry (``LATEST`` naming ``../../elsewhere/000007``),
an artifact made with another major.minor of scikit-learn, NGBoost or NumPy than the running
ones, or one that needs features the running pipeline does not produce. `ModelWatcher` polls
``LATEST`` and swaps models without a restart, keeping the previous one when a new one is
refused.

>>> import tempfile
>>> from batch.models import LinkModel
>>> X = np.random.default_rng(0).random((200, 2))
>>> model = LinkModel("hgb", n_estimators=5).fit(X, np.c_[X[:, 0] > .5, X[:, 1] > .8],
...                                               feature_names=["a", "b"])
>>> reg = ModelRegistry(Path(tempfile.mkdtemp()), key=b"a secret")
>>> reg.register(model, training={"rows": 200}, scores={}).version
'000001'
>>> reg.load("link", required_features={"a"})
Traceback (most recent call last):
...
batch.registry.ArtifactRefused: link/000001 needs features the pipeline does not produce: ['b']
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import pickle
import secrets
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CHECKED_LIBRARIES",
    "DEFAULT_POLL_SECONDS",
    "Artifact",
    "ArtifactRefused",
    "ModelRegistry",
    "ModelWatcher",
]

log = logging.getLogger(__name__)

MODEL_FILE = "model.pkl"
META_FILE = "meta.json"
LATEST_FILE = "LATEST"
#: The environment variable (the ``registry_key`` setting) holding the signing key.
KEY_ENV = "LOOKAROUND_REGISTRY_KEY"
#: What the HMAC covers starts with this (a signature of something else never matches).
_SIGNED = b"lookaround-registry-artifact/1\n"
_UNSET: Any = object()
#: libraries whose major.minor must match between the artifact and the running process
CHECKED_LIBRARIES = ("sklearn", "ngboost", "numpy")
#: How often a `ModelWatcher` looks for a new version, in seconds: the one default of the poll
#: period, which the workers' ``registry_poll_seconds`` setting reads too (so this module
#: imports no training library at its top: the settings load it at every command's start).
DEFAULT_POLL_SECONDS = 30.0


def _library_versions() -> dict[str, str]:
    """`batch.models.library_versions`: the running versions of the libraries a model needs."""
    # Settings read this module (`DEFAULT_POLL_SECONDS`) and must start fast.
    # Deferred: batch.models imports scikit-learn, pandas and SciPy (about a second).
    from batch.models import library_versions

    return library_versions()


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


def registry_key() -> bytes | None:
    """The signing key: the environment's ``LOOKAROUND_REGISTRY_KEY``; else this user's own
    key (`local_key_file`, made on first use), so that a registry one user trains and reads on
    one machine works without set-up while a registry directory others can write is no way in;
    None where neither can be had (no home to keep a key in)."""
    value = os.environ.get(KEY_ENV, "")
    if value:
        return value.encode()
    try:
        return _local_key(local_key_file())
    except OSError:
        return None


def local_key_file() -> Path:
    """Where this user's own registry key is kept (``$XDG_CONFIG_HOME/lookaround``, else
    ``~/.config/lookaround``). Deployments that train in one place and serve in another share
    one key through ``LOOKAROUND_REGISTRY_KEY`` instead."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "lookaround" / "registry.key"


def _local_key(path: Path) -> bytes:
    """The key in ``path``, made (random, readable by its owner only) if absent."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # made meanwhile by another process
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32))
    key = path.read_text().strip()
    if not key:
        raise OSError(f"{path} is empty")
    return key.encode()


def _signature(key: bytes, model_bytes: bytes, meta: dict[str, Any]) -> str:
    """HMAC-SHA256 of the model's bytes and its metadata (all but the signature itself)."""
    rest = {k: v for k, v in meta.items() if k != "hmac"}
    canonical = json.dumps(_jsonable(rest), sort_keys=True, separators=(",", ":")).encode()
    mac = hmac.new(key, _SIGNED, hashlib.sha256)
    mac.update(hashlib.sha256(model_bytes).digest())
    mac.update(canonical)
    return mac.hexdigest()


class ModelRegistry:
    """Versioned model artifacts under ``root`` (see the module docstring).

    ``key``: the HMAC key that signs and checks artifacts; by default the environment's
    ``LOOKAROUND_REGISTRY_KEY`` (None: artifacts are registered unsigned and none is loaded).
    """

    def __init__(self, root: Path | str, *, key: bytes | str | None = _UNSET) -> None:
        self.root = Path(root)
        if key is _UNSET:
            key = registry_key()
        self.key = key.encode() if isinstance(key, str) else key

    def _dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad model name {name!r}")
        return self.root / name

    def _version_dir(self, name: str, version: str) -> Path:
        """The directory of ``version``, which must be a version number naming a directory
        inside this registry (`ArtifactRefused` otherwise: ``LATEST`` is data, not a path)."""
        base = self._dir(name)
        if not (isinstance(version, str) and version.isascii() and version.isdigit()):
            raise ArtifactRefused(
                f"{name}: version {str(version)[:80]!r} is not a version number "
                f"(LATEST must name a version directory of {base})"
            )
        path = base / version
        try:
            inside = path.resolve(strict=True).is_relative_to(base.resolve(strict=True))
        except (FileNotFoundError, OSError):
            raise ArtifactRefused(f"{name}/{version} is not registered under {self.root}") from None
        if not inside or not path.is_dir():
            raise ArtifactRefused(f"{name}/{version} leads outside the registry {base}: refused")
        return path

    def versions(self, name: str = "link") -> list[str]:
        """Registered versions of ``name``, oldest first."""
        base = self._dir(name)
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and p.name.isdigit())

    def latest(self, name: str = "link") -> str | None:
        """The version ``LATEST`` points at (None if nothing is registered). Only a version
        number is taken from it: anything else (a path) is refused."""
        try:
            text = (self._dir(name) / LATEST_FILE).read_text(errors="replace").strip()
        except FileNotFoundError:
            return None
        if text and not (text.isascii() and text.isdigit()):
            raise ArtifactRefused(
                f"{name}: LATEST holds {text[:80]!r}, not a version number: refused"
            )
        return text or None

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
            model_bytes = pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)
            with open(model_path, "wb") as f:
                f.write(model_bytes)
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
                "libraries": getattr(model, "versions_", None) or _library_versions(),
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
                meta["hmac"] = None if self.key is None else _signature(self.key, model_bytes, meta)
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
        if self.key is None:
            log.warning(
                "%s/%s registered unsigned: no %s, so no worker will load it",
                name,
                version,
                KEY_ENV,
            )
        if set_latest:
            self.set_latest(name, version)
        return Artifact(name, version, model, meta)

    def set_latest(self, name: str, version: str) -> None:
        """Point ``LATEST`` at ``version`` atomically (a reader sees the old or the new)."""
        base = self._dir(name)
        try:
            self._version_dir(name, version)
        except ArtifactRefused as exc:
            raise ValueError(f"{name}/{version} is not registered: {exc}") from None
        tmp = base / f".LATEST-{uuid.uuid4().hex}"
        tmp.write_text(version + "\n")
        os.replace(tmp, base / LATEST_FILE)

    def meta(self, name: str = "link", version: str | None = None) -> dict[str, Any]:
        version = version or self.latest(name)
        if version is None:
            raise ArtifactRefused(f"no model {name!r} registered under {self.root}")
        path = self._version_dir(name, version) / META_FILE
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
        version = version or self.latest(name)
        meta = self.meta(name, version)
        label = f"{name}/{version}"
        if str(meta.get("version")) != version:
            raise ArtifactRefused(f"{label}: meta.json says version {meta.get('version')!r}")
        path = self._version_dir(name, version) / MODEL_FILE  # type: ignore[arg-type]
        if not path.exists():
            raise ArtifactRefused(f"{label}: {MODEL_FILE} is missing")
        model_bytes = path.read_bytes()  # checked and loaded from these very bytes
        self._check_signature(label, model_bytes, meta)
        digest = hashlib.sha256(model_bytes).hexdigest()
        if digest != meta.get("sha256"):
            raise ArtifactRefused(
                f"{label}: checksum mismatch: {MODEL_FILE} has sha256 {digest[:12]}..., "
                f"meta.json records {str(meta.get('sha256'))[:12]}... (corrupted or tampered)"
            )
        running = running_versions or _library_versions()
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
            model = pickle.loads(model_bytes)  # signed by the key's holder: see the docstring
        except Exception as exc:  # a matching checksum but an unloadable pickle
            raise ArtifactRefused(f"{label}: cannot unpickle {MODEL_FILE}: {exc!r}") from exc
        names = getattr(model, "feature_names_", None)
        if names is not None and list(names) != features:
            raise ArtifactRefused(f"{label}: meta.json's feature list differs from the model's")
        return Artifact(name, version, model, meta)

    def _check_signature(self, label: str, model_bytes: bytes, meta: dict[str, Any]) -> None:
        """`ArtifactRefused` unless ``meta``'s HMAC matches the model's bytes and metadata
        under this registry's key: checked before anything is unpickled."""
        if self.key is None:
            raise ArtifactRefused(
                f"{label}: not loaded: no {KEY_ENV} is set, and registry artifacts are loaded "
                "only after an HMAC check (set the same secret where models are trained and "
                "where they are served)"
            )
        recorded = meta.get("hmac")
        if not isinstance(recorded, str) or not recorded:
            raise ArtifactRefused(
                f"{label}: unsigned (registered without {KEY_ENV}): retrain with "
                "`lookaround train` under the key"
            )
        expected = _signature(self.key, model_bytes, meta)
        if not hmac.compare_digest(expected, recorded):
            raise ArtifactRefused(
                f"{label}: HMAC mismatch: {MODEL_FILE} or {META_FILE} was changed after it was "
                f"signed, or signed with another {KEY_ENV}: not loaded"
            )


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
        poll_seconds: float = DEFAULT_POLL_SECONDS,
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
        try:
            latest = self.registry.latest(self.name)
        except ArtifactRefused as exc:
            latest = f"refused: {exc}"  # seen once, warned once, until LATEST changes
            if latest != self._seen:
                self._seen = latest
                self._refuse(exc)
            return self._artifact
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
            self._refuse(exc)
        return self._artifact

    def _refuse(self, exc: ArtifactRefused) -> None:
        self.refused += 1
        self.last_error = str(exc)
        kept = self._artifact.id if self._artifact else "none"
        log.warning("model refused, keeping %s: %s", kept, exc)
