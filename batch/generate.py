"""Seeded synthetic crawls: pages x fetches with the link dynamics of a kind of site.

Why: the new-outlink predictor needs crawls that are reproducible, large on demand and shaped
like real ones to be tested and benchmarked on, and more than one kind of site, because which
signal predicts new links differs between them. A regime (``GeneratorConfig.regime``) is a
frozen set of dynamics constants with its own statistics targets (``batch.crawlgen.targets``):

* ``paper``: paper-like web pages, weekly (Dang et al. 2022; ``PAPER_TARGETS``);
* ``news``: news section pages every 12 hours: day rhythm, tickers, rotating teasers;
* ``docs``: a sparse documentation site with translations, weekly: links change with edits;
* ``aggregator``: awesome-list pages, weekly: new links mostly external, persistent rates.

Every random draw comes from numpy Generators spawned from ``config.seed``: the same config
gives byte-identical output.
"""

from __future__ import annotations

import time
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from batch.crawlgen.aggregator import AggregatorWorld
from batch.crawlgen.config import CONTENT_MODES, REGIMES, GeneratorConfig
from batch.crawlgen.docs import DocsWorld
from batch.crawlgen.news import NewsWorld
from batch.crawlgen.paper import PaperWorld
from batch.crawlgen.stats import interval_statistics, weekly_statistics
from batch.crawlgen.targets import PAPER_TARGETS, REGIME_TARGETS
from batch.crawlgen.world import World

__all__ = [
    "CONTENT_MODES",
    "PAPER_TARGETS",
    "REGIMES",
    "REGIME_TARGETS",
    "GeneratorConfig",
    "generate_events",
    "interval_statistics",
    "weekly_statistics",
    "write_events",
]

_WORLDS: dict[str, type[World]] = {
    "paper": PaperWorld,
    "news": NewsWorld,
    "docs": DocsWorld,
    "aggregator": AggregatorWorld,
}


def _world(config: GeneratorConfig) -> World:
    return _WORLDS[config.regime](config)


def _events(config: GeneratorConfig, raw_embedding: bool) -> Iterator[dict[str, Any]]:
    world = _world(config)
    for crawl in range(config.crawls):
        if crawl:
            world.advance(crawl)
        yield from world.events(crawl, raw_embedding)


def generate_events(config: GeneratorConfig) -> Iterator[dict[str, Any]]:
    """Events in crawl order (crawl 0 first), within a crawl in fetched_at order."""
    return _events(config, raw_embedding=False)


class _ChunkWriter:
    """Writes chunks of lines in order; for .gz, each chunk is deflated on a worker thread.

    zlib drops the GIL, so compression overlaps event generation on another core. Every chunk
    becomes its own gzip member (a multi-member file, which gzip readers concatenate) with a
    zero mtime and no file name: the bytes depend on the config only.
    """

    def __init__(self, path: Path, level: int = 1, workers: int = 2) -> None:
        self.file: BinaryIO = path.open("wb")
        self.gzip = path.name.endswith(".gz")
        self.level = level
        self.pool = ThreadPoolExecutor(max_workers=workers) if self.gzip else None
        self.pending: deque[Future[bytes]] = deque()
        self.limit = 2 * workers

    @staticmethod
    def _deflate(chunk: bytes, level: int) -> bytes:
        packer = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return packer.compress(chunk) + packer.flush()

    def write(self, chunk: bytes) -> None:
        if self.pool is None:
            self.file.write(chunk)
            return
        self.pending.append(self.pool.submit(self._deflate, chunk, self.level))
        while len(self.pending) > self.limit or (self.pending and self.pending[0].done()):
            self.file.write(self.pending.popleft().result())

    def close(self) -> None:
        try:
            while self.pending:
                self.file.write(self.pending.popleft().result())
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)
            self.file.close()


def write_events(path: Path, config: GeneratorConfig, progress: bool = True) -> dict[str, Any]:
    """Write the crawl as JSON Lines (gzip when the name ends in .gz); returns a summary."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    total = config.pages * config.crawls
    began = time.perf_counter()
    writer = _ChunkWriter(path)
    dumps, opt = orjson.dumps, orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
    count = 0
    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        disable=not progress,
    )
    try:
        with bar:
            task = bar.add_task(f"generating {path.name}", total=total)
            lines: list[bytes] = []
            for ev in _events(config, raw_embedding=True):
                lines.append(dumps(ev, option=opt))
                if len(lines) == 2_000:
                    writer.write(b"".join(lines))
                    count += len(lines)
                    lines = []
                    bar.update(task, completed=count)
            if lines:
                writer.write(b"".join(lines))
                count += len(lines)
            bar.update(task, completed=count)
    finally:
        writer.close()
    return {
        "events": count,
        "pages": config.pages,
        "crawls": config.crawls,
        "path": str(path),
        "bytes": path.stat().st_size,
        "seconds": round(time.perf_counter() - began, 3),
    }
