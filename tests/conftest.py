"""Shared fixtures: a seeded generated crawl replayed into a run directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from batch.generate import GeneratorConfig, write_events
from online.scoring import DEFAULT_SCORER
from streams.replay import replay

MakeRun = Callable[..., tuple[Path, Path]]


@pytest.fixture(scope="session")
def generated_run(tmp_path_factory: pytest.TempPathFactory) -> MakeRun:
    """``generated_run(name, config, scorer=DEFAULT_SCORER) -> (events file, run dir)``: writes
    the crawl ``config`` describes and replays it, in a fresh directory named ``name``."""

    def make(name: str, config: GeneratorConfig, scorer: str = DEFAULT_SCORER) -> tuple[Path, Path]:
        base = tmp_path_factory.mktemp(name)
        events = base / "crawl.jsonl.gz"
        write_events(events, config, progress=False)
        replay(events, base / "run", scorer=scorer, progress=False)
        return events, base / "run"

    return make
