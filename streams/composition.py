"""The composition root: where a pipeline is put together, for the replay and the workers alike.

A `PagePipeline` is a page store, a vector index, a scorer and a `PipelineConfig`; a learned
scorer brings its model source (the registry) and its batch-model refresher
(`streams.scorers.build_scorer`). `build_pipeline` is the one function that joins them:

* the embedded replay (`streams.replay`, and the simulation through it) calls it with the
  run's options: page records in memory, a fresh FAISS index, one registered model for the
  whole run;
* a live worker (`streams.live.LiveProcessor`, which `streams.app.create_app` builds) calls it
  through `worker_pipeline`, which reads the worker's `Settings`: the Redis store (behind the
  worker's deferred writes), the FAISS replica, the registry watched every
  ``registry_poll_seconds``, Redis errors counted as the infrastructure's, not an event's.

So what a setting does to the pipeline can be followed from here, and the replay and the
workers cannot drift apart in how they assemble it: given the same events, they give the same
priorities (`tests/test_live.py`, `tests/test_replay_digest.py`).
"""

from __future__ import annotations

from pathlib import Path

from redis.exceptions import RedisError

from batch.registry import DEFAULT_POLL_SECONDS
from online.index import FaissIndex
from online.pipeline import INFRASTRUCTURE_ERRORS, PagePipeline, PipelineConfig
from online.scorers import DEFAULT_SCORER
from online.stores import CompactMemoryPageStore, PageStore
from streams.redis_store import RedisPageStore, settings_store
from streams.scorers import build_scorer
from streams.settings import Settings


def build_pipeline(
    scorer: str = DEFAULT_SCORER,
    config: PipelineConfig | None = None,
    *,
    store: PageStore | None = None,
    index: FaissIndex | None = None,
    registry_dir: Path | None = None,
    live: bool = False,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    refresh: bool = True,
    refresh_registry: Path | None = None,
    infrastructure_errors: tuple[type[BaseException], ...] = INFRASTRUCTURE_ERRORS,
) -> PagePipeline:
    """A pipeline with the scorer named ``scorer`` over ``store`` (default: page records in
    memory, kept as bytes: `CompactMemoryPageStore`) and ``index`` (default: an empty FAISS
    index of the configured dimension).

    A learned scorer starts from the latest model in ``registry_dir``: one model for the whole
    run, or with ``live`` the registry's watcher, polled every ``poll_seconds``; unless
    ``refresh`` is off it refreshes its batch model from the stream, registering each version
    in ``refresh_registry`` when given. ``infrastructure_errors``: the exceptions that fail a
    whole batch (to be retried) rather than the event being processed."""
    config = config or PipelineConfig()
    return PagePipeline(
        store if store is not None else CompactMemoryPageStore(),
        index if index is not None else FaissIndex(dim=config.embedding_dim),
        build_scorer(
            scorer,
            history=config.history,
            registry_dir=registry_dir,
            live=live,
            poll_seconds=poll_seconds,
            refresh=refresh,
            refresh_registry=refresh_registry,
        ),
        config,
        infrastructure_errors=infrastructure_errors,
    )


def pipeline_config(settings: Settings) -> PipelineConfig:
    """The pipeline's configuration that a worker's settings give."""
    return PipelineConfig(
        history=settings.history,
        neighbours=settings.neighbours,
        drift_similarity=settings.drift_similarity,
        drift_growth=settings.drift_growth,
        embedding_dim=settings.embedding_dim,
        fetch_budget_per_day=settings.fetch_budget_per_day,
        compact_store=settings.compact_store,
    )


def worker_pipeline(
    settings: Settings, store: PageStore, *, index: FaissIndex | None = None
) -> PagePipeline:
    """A live worker's pipeline over ``store`` (its Redis store, behind the writes not yet
    made) and ``index`` (its FAISS replica): the scorer, the configuration and the registry
    that ``settings`` name; a Redis error fails the batch, to be retried."""
    return build_pipeline(
        settings.scorer,
        pipeline_config(settings),
        store=store,
        index=index,
        registry_dir=settings.registry_dir,
        live=True,
        poll_seconds=settings.registry_poll_seconds,
        infrastructure_errors=(*INFRASTRUCTURE_ERRORS, RedisError),
    )


def worker_store(settings: Settings) -> RedisPageStore:
    """A live worker's page store (`streams.redis_store.settings_store`): its learned state
    under ``worker_id``, its writes acknowledged by ``redis_wait_replicas`` replicas."""
    return settings_store(settings, worker_id=settings.worker_id, wait=True)


__all__ = ["build_pipeline", "pipeline_config", "worker_pipeline", "worker_store"]
