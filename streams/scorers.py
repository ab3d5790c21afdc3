"""Build the scorer a run asks for, wiring learned scorers to their batch models.

The core's scorers do no file I/O and no training-library work; here they are attached:

* the refreshed batch model (``ensemble`` and ``batch``): a `BatchRefresher` whose trainer is
  `batch.refresh.fit_rate_model`; each model that takes over is registered in
  ``refresh_registry`` when one is given (a replay keeps them in its run directory);
* a registered model (``registry_dir``), the batch candidate until the first refresh: a fixed
  artifact for a replay (the same model from the first event to the last, so a replay is
  reproducible) or the registry's watcher for a live worker (a new version is picked up
  without a restart; a refused one leaves the previous in use).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from batch.refresh import fit_rate_model
from batch.registry import DEFAULT_POLL_SECONDS, ArtifactRefused, ModelRegistry, ModelWatcher
from online.features import feature_names
from online.refresh import BatchRefresher, RefreshPolicy
from online.scorers import LEARNED, get_scorer
from online.scoring import Scorer

log = logging.getLogger(__name__)

BATCH_MODEL = "link"
#: Name under which refreshed models are registered.
REFRESHED_MODEL = "link-refresh"


def missing_model(name: str, registry_dir: Path | None, *, refresh: bool = True) -> str | None:
    """What to tell a user whose ``batch`` scorer has no model to use yet, or None.

    One behaviour everywhere (replay, worker): LBLA stands in, and every priority it gives has
    the reason code ``no_model``, until a model is refreshed from the stream (or, live, one is
    registered later).
    """
    if name != "batch":
        return None
    registered = False
    if registry_dir is not None:
        try:
            registered = ModelRegistry(Path(registry_dir)).latest(BATCH_MODEL) is not None
        except ArtifactRefused as exc:  # a worker starts anyway: LBLA stands in
            return f"the batch scorer's registry: {exc}: LBLA stands in (reason no_model)"
    if registered:
        return None
    until = (
        "until the first model is refreshed from the stream"
        if refresh
        else "(`lookaround train RUN_DIR --registry DIR` registers one)"
    )
    where = (
        "without a registry"
        if registry_dir is None
        else f"no {BATCH_MODEL!r} model in {registry_dir}"
    )
    return f"the batch scorer {where}: LBLA stands in (reason no_model) {until}"


def build_scorer(
    name: str,
    *,
    history: int,
    registry_dir: Path | None = None,
    live: bool = False,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    refresh: bool = True,
    refresh_registry: Path | None = None,
    refresh_policy: RefreshPolicy | None = None,
) -> Scorer:
    """The scorer ``name``; ``batch`` / ``ensemble`` refresh their batch model from the stream
    (unless ``refresh`` is off) and start from the latest model in ``registry_dir``."""
    if name not in LEARNED:
        return get_scorer(name)
    options: dict[str, object] = {"history": history}
    if name in ("batch", "ensemble"):
        if registry_dir is not None:
            options["model_source"] = _registered(registry_dir, history, live, poll_seconds)
        if refresh:
            options["refresher"] = _refresher(refresh_registry, refresh_policy)
    return get_scorer(name, **options)


def _registered(registry_dir: Path, history: int, live: bool, poll_seconds: float):  # type: ignore[no-untyped-def]
    registry = ModelRegistry(Path(registry_dir))
    available = set(feature_names(history))
    if live:
        watcher = ModelWatcher(registry, BATCH_MODEL, available, poll_seconds=poll_seconds)
        return watcher.current
    # A replay uses one model throughout (none: see `missing_model`).
    latest = registry.latest(BATCH_MODEL)
    artifact = (
        None if latest is None else registry.load(BATCH_MODEL, latest, required_features=available)
    )
    return lambda: artifact


def _refresher(registry_dir: Path | None, policy: RefreshPolicy | None) -> BatchRefresher:
    on_model = None
    if registry_dir is not None:
        registry = ModelRegistry(Path(registry_dir))

        def on_model(version: str, model: Any, info: dict[str, Any]) -> None:
            registry.register(
                model, name=REFRESHED_MODEL, training=info | {"refresh": version}, scores={}
            )

    return BatchRefresher(fit_rate_model, policy, on_model, on_error=_refresh_failed)


def _refresh_failed(version: str, exc: BaseException) -> None:
    """A refresh that failed is logged with its traceback; scoring goes on (`BatchRefresher`)."""
    log.error(
        "batch model %s failed to refresh (%s: %s); the model before it goes on scoring",
        version,
        type(exc).__name__,
        exc,
        exc_info=exc,
    )
