"""Sizing figures for docs/scaling.md, measured on this machine.

    python -m deploy.sizing index [--pages 200000]            # FAISS replica bytes per page
    python -m deploy.sizing live [--pages 5000 --crawls 4 --workers 1]
                                                             # events/s per worker, Redis B/page

``index`` fills a `online.index.FaissIndex` (192-d, as deployed: exact below 10,000 pages,
then IVF) with N unit vectors in a fresh process and reports the resident memory it added per
page, next to the raw vector (192 x 4 B) and the serialised FAISS index; then the serialised
size per page of the compressed alternative, IVF-PQ with 48-byte codes.

``live`` runs the live pipeline as docker-compose.yml does, outside Docker: a local Tansu
broker (`lookaround broker`), a fresh redis-server with the compose file's AOF arguments,
`lookaround topics`; it produces a generated crawl first, then starts W workers and times them
from the first to the last priority update (so the figure is the workers' rate, not the
producer's), and reports Redis memory per page (``used_memory`` growth / pages) with a
per-key-kind breakdown (``MEMORY USAGE`` on a sample).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from streams.kafka_io import free_port, wait_for_port

BIN = Path(sys.executable).parent


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def index(pages: int, dim: int = 192, seed: int = 0) -> dict[str, float]:
    import faiss
    import numpy as np

    from online.index import FaissIndex

    rng = np.random.default_rng(seed)
    chunk = 20_000
    idx = FaissIndex(dim=dim)
    base = _rss()
    started = time.perf_counter()
    for start in range(0, pages, chunk):
        n = min(chunk, pages - start)
        vectors = rng.standard_normal((n, dim), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        idx.upsert(np.arange(start, start + n, dtype=np.int64), vectors)
        del vectors
    seconds = time.perf_counter() - started
    grown = _rss() - base
    serialised = len(faiss.serialize_index(idx._index))
    if idx.is_ivf and idx._grid is not None:  # byte codes: the centroids are kept beside
        serialised += len(faiss.serialize_index(idx._centroids))
    # The compressed alternative for large deployments: IVF-PQ, 48 sub-quantizers x 8 bits
    # (48 B codes), same lists, a hash-table direct map (pages can be replaced) like ours.
    vectors = rng.standard_normal((min(pages, 100_000), dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    quantizer = faiss.IndexFlatIP(dim)
    pq = faiss.IndexIVFPQ(quantizer, dim, 512, 48, 8, faiss.METRIC_INNER_PRODUCT)
    pq.train(vectors)
    pq.set_direct_map_type(faiss.DirectMap.Hashtable)
    for start in range(0, pages, chunk):
        n = min(chunk, pages - start)
        block = rng.standard_normal((n, dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        pq.add_with_ids(block, np.arange(start, start + n, dtype=np.int64))
    pq_serialised = len(faiss.serialize_index(pq))
    return {
        "ivfpq48_serialised_bytes_per_page": pq_serialised / pages,
        "pages": pages,
        "mode": repr(idx),
        "raw_vector_bytes": dim * 4,
        "serialised_bytes_per_page": serialised / pages,
        "rss_bytes_per_page": grown / pages,
        "upsert_seconds": seconds,
    }


# -- live -------------------------------------------------------------------------------------


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def live(pages: int, crawls: int, workers: int, quiet_seconds: float = 15) -> dict[str, float]:
    import redis
    import yaml
    from kafka import KafkaConsumer

    compose = yaml.safe_load(
        (Path(__file__).resolve().parents[1] / "docker-compose.yml").read_text()
    )
    tmp = Path(tempfile.mkdtemp(prefix="lookaround-sizing-"))
    kport, rport = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOKAROUND_")}
    for key, value in compose["services"]["worker-1"]["environment"].items():
        env[key] = str(value)
    env.update(
        LOOKAROUND_KAFKA_BOOTSTRAP=f"127.0.0.1:{kport}",
        LOOKAROUND_REDIS_URL=f"redis://127.0.0.1:{rport}/0",
        LOOKAROUND_REGISTRY_DIR=str(tmp / "models"),
    )
    procs: list[subprocess.Popen] = []
    log = open(tmp / "log.txt", "ab")  # noqa: SIM115

    def start(argv: list[str], **extra: str) -> subprocess.Popen:
        p = subprocess.Popen(
            argv, env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT, cwd=tmp
        )
        procs.append(p)
        return p

    try:
        start([str(BIN / "lookaround"), "broker", "--port", str(kport)])
        wait_for_port(kport, timeout=30.0)
        redis_cmd = compose["services"]["redis"]["command"]
        start([*redis_cmd, "--port", str(rport), "--bind", "127.0.0.1", "--dir", str(tmp)])
        wait_for_port(rport, timeout=30.0)
        client = redis.Redis(port=rport)
        used_before = int(client.info("memory")["used_memory"])
        subprocess.run(
            [str(BIN / "lookaround"), "topics"], env=env, check=True, stdout=log, stderr=log
        )
        events = tmp / "crawl.jsonl.gz"
        subprocess.run(
            [
                str(BIN / "lookaround"),
                "generate",
                "--out",
                str(events),
                "--pages",
                str(pages),
                "--crawls",
                str(crawls),
            ],
            env=env,
            check=True,
            stdout=log,
            stderr=log,
        )
        produced = time.perf_counter()
        subprocess.run(
            [str(BIN / "lookaround"), "produce", str(events), "--quiet"],
            env=env,
            check=True,
            stdout=log,
            stderr=log,
        )
        produce_seconds = time.perf_counter() - produced
        n_events = pages * crawls
        for i in range(workers):
            start(
                [str(BIN / "lookaround"), "worker"],
                LOOKAROUND_WORKER_ID=f"worker-{i + 1}",
                LOOKAROUND_WEB_PORT=str(free_port()),
            )
        consumer = KafkaConsumer(
            env.get("LOOKAROUND_TOPIC_PRIORITIES", "lookaround.priorities"),
            bootstrap_servers=env["LOOKAROUND_KAFKA_BOOTSTRAP"],
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            group_id=None,
        )
        first = last = None
        count = 0
        waiting_since = idle_since = time.monotonic()
        while True:
            got = consumer.poll(timeout_ms=1000)
            for records in got.values():
                for _record in records:
                    now = time.monotonic()
                    first = first or now
                    last = now
                    count += 1
            now = time.monotonic()
            if got:
                idle_since = now
            elif first is None and now - waiting_since > 300:
                raise TimeoutError("no priority update in 300 s; see " + str(tmp / "log.txt"))
            elif first is not None and now - idle_since > quiet_seconds:
                break
        consumer.close()
        used_after = int(client.info("memory")["used_memory"])
        per_kind: dict[str, list[int]] = defaultdict(list)
        for i, key in enumerate(client.scan_iter(match="lookaround:*", count=1000)):
            if i >= 4000:
                break
            kind = key.decode().split(":")[1]
            per_kind[kind].append(int(client.memory_usage(key) or 0))
        keys = int(client.dbsize())
        seconds = (last - first) if first and last and last > first else float("nan")
        return {
            "pages": pages,
            "events": n_events,
            "workers": workers,
            "priority_updates": count,
            "produce_events_per_s": n_events / produce_seconds,
            "seconds_first_to_last_priority": seconds,
            "events_per_s": n_events / seconds,
            "events_per_s_per_worker": n_events / seconds / workers,
            "redis_keys": keys,
            "redis_used_memory_bytes_per_page": (used_after - used_before) / pages,
            "redis_memory_usage_by_kind": {
                k: sum(v) / len(v) for k, v in sorted(per_kind.items()) if v
            },
        }
    finally:
        for p in reversed(procs):
            _stop(p)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p_index = sub.add_parser("index")
    p_index.add_argument("--pages", type=int, default=200_000)
    p_live = sub.add_parser("live")
    p_live.add_argument("--pages", type=int, default=5_000)
    p_live.add_argument("--crawls", type=int, default=4)
    p_live.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    out = index(args.pages) if args.what == "index" else live(args.pages, args.crawls, args.workers)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
