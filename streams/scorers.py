"""Build the scorer a run asks for, wiring learned scorers to the model registry.

The core's scorers do no file I/O; here the batch model source is attached: a fixed artifact
for a replay (the same model from the first event to the last, so a replay is reproducible)
or the registry's watcher for a live worker (a refreshed model is picked up without a
restart; a refused one leaves the previous in use).
"""

from __future__ import annotations

from pathlib import Path

from online.features import feature_names
from online.scoring import LEARNED, Scorer, get_scorer

BATCH_MODEL = "link"


def build_scorer(
    name: str,
    *,
    history: int,
    registry_dir: Path | None = None,
    live: bool = False,
    poll_seconds: float = 30.0,
) -> Scorer:
    """The scorer ``name``; ``batch`` / ``ensemble`` read models from ``registry_dir``."""
    if name not in LEARNED:
        return get_scorer(name)
    options: dict[str, object] = {"history": history}
    if name in ("batch", "ensemble") and registry_dir is not None:
        from batch.registry import ModelRegistry, ModelWatcher

        registry = ModelRegistry(Path(registry_dir))
        available = set(feature_names(history))
        if live:
            watcher = ModelWatcher(registry, BATCH_MODEL, available, poll_seconds=poll_seconds)
            options["model_source"] = watcher.current
        else:
            # A replay uses one model throughout and says so loudly when it cannot.
            latest = registry.latest(BATCH_MODEL)
            if latest is None and name == "batch":
                raise ValueError(
                    f"no {BATCH_MODEL!r} model in {registry_dir}; run `lookaround train RUN_DIR "
                    f"--registry {registry_dir}` first"
                )
            artifact = (
                None
                if latest is None
                else registry.load(BATCH_MODEL, latest, required_features=available)
            )
            options["model_source"] = lambda: artifact
    return get_scorer(name, **options)
