"""Redis memory a page, with the compact store and without.

Starts a Redis of its own (``redis-server`` on ``--port``, nothing on disk), replays a
generated crawl (``--pages`` x ``--crawls``, embeddings drifting ``--embedding-drift`` a
fetch) through the pipeline over the Redis store, once with ``PipelineConfig.compact_store``
off (the default) and once on, and prints per run the growth of ``used_memory`` a page, the
part of it that is the online learner's state (the ensemble's rows waiting for its next
epoch, one key a worker, whatever the number of pages) and the page records' make-up: their
``MEMORY USAGE`` (the value rounded up to the allocator's size class, the key, Redis's entry
and object) and the mean bytes of each section.

    python bench/redis_bytes.py                     # 20,000 pages x 3 crawls
    python bench/redis_bytes.py --pages 100000
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

from batch.generate import GeneratorConfig, write_events
from batch.reader import read_batches
from online.pipeline import PipelineConfig
from streams.composition import build_pipeline
from streams.redis_scripts import record_layout
from streams.redis_store import RedisPageStore


def start_redis(port: int) -> subprocess.Popen:
    """A Redis server of this benchmark's own, answering once it is up."""
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            return server
        except redis.ConnectionError:
            time.sleep(0.05)
    server.terminate()
    raise SystemExit(f"redis-server did not answer on port {port}")


SECTIONS = ("stats", "state", "related", "row", "group")


def page_records(client: redis.Redis) -> str:
    """The page records' make-up: records a page's worth, their ``MEMORY USAGE`` and the
    mean bytes of each section (`streams.redis_store`'s layout) and of the head."""
    count, usage, value = 0, 0, 0
    sections = np.zeros(len(SECTIONS))
    for key in client.scan_iter(match="bench:*p:*", count=1000):
        record = client.get(key)
        if record is None:
            continue
        count += 1
        usage += client.memory_usage(key) or 0
        value += len(record)
        sections += record_layout(record)[1]
    if not count:
        return "no page records"
    means = ", ".join(f"{n} {v / count:.0f}" for n, v in zip(SECTIONS, sections, strict=True))
    head = value / count - sections.sum() / count
    return (
        f"{count:,} records, MEMORY USAGE {usage / count:,.0f} B a record, value "
        f"{value / count:,.0f} B (head {head:.0f}, {means})"
    )


def bytes_a_page(
    client: redis.Redis, events: Path, pages: int, compact: bool
) -> tuple[float, float, str]:
    """used_memory growth a page, the learner's share and the page records' make-up, after
    replaying ``events``."""
    client.flushall()
    before = int(client.info("memory")["used_memory"])
    config = PipelineConfig(compact_store=compact)
    store = RedisPageStore(client, prefix="bench:")
    pipeline = build_pipeline("ensemble", config, store=store, refresh=False)
    for batch in read_batches(events, batch_size=2000, embedding_dim=config.embedding_dim):
        pipeline.process_isolated(batch.fetches)
    used = int(client.info("memory")["used_memory"]) - before
    learner = sum(client.memory_usage(key) or 0 for key in client.scan_iter(match="*learner*"))
    return used / pages, learner / pages, page_records(client)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--crawls", type=int, default=3)
    ap.add_argument("--embedding-drift", type=float, default=0.02)
    ap.add_argument("--port", type=int, default=6393)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        events = Path(work) / "crawl.jsonl.gz"
        config = GeneratorConfig(
            pages=args.pages, crawls=args.crawls, seed=3, embedding_drift=args.embedding_drift
        )
        write_events(events, config)
        server = start_redis(args.port)
        try:
            client = redis.Redis(port=args.port)
            results = {c: bytes_a_page(client, events, args.pages, c) for c in (False, True)}
        finally:
            server.terminate()
            server.wait()
    for compact, (total, learner, records) in results.items():
        name = "compact store" if compact else "float32 (default)"
        pages = total - learner
        print(f"{name:18s} {total:7,.0f} B a page   learner {learner:5,.0f}   pages {pages:7,.0f}")
        print(f"{'':18s} {records}")
    saved = results[False][0] - results[True][0]
    print(f"the compact store saves {saved:,.0f} B a page ({saved / results[False][0]:.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
