"""End-to-end throughput and latency of the live pipeline: Tansu + real Redis + real workers.

    python bench/live_throughput.py                       # 100,000 pages x 3 crawls
    python bench/live_throughput.py --pages 20000 --crawls 3

1. Throughput: the whole crawl is produced to a 2-partition fetched-page topic first, then
   N workers (1, then 2) drain it; events/s per worker = events / drain time / N. The
   producing itself (`lookaround produce`'s `produce_file`) is reported as produced/s.
2. Latency: one worker, fresh topics, events produced at half the measured one-worker rate;
   latency of an event = the priority message's timestamp - the fetched message's timestamp
   (both stamped by their producers on this machine); p50 / p99 reported.
3. Redis memory per page: MEMORY USAGE of every key kind of a sample of keys (page records,
   sibling groups; the page records' sections by size), and the growth of INFO used_memory
   (summed over a cluster's masters) over the throughput run divided by the pages stored.

``--redis-url`` points the workers at another Redis (a private server, or a node of a Redis
Cluster: ``--cluster`` starts a local one of 3 masters with a replica each), so that other
clients of the default one do not move ``used_memory``.

Figures print as a table and as JSON (--json FILE). Floors (issue 5): 3,000 events/s per
worker; p99 event -> priority latency < 1 s at half that rate.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import numpy as np
import orjson
from redis.cluster import RedisCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batch.generate import GeneratorConfig, write_events
from online.fetch import parse_fetch
from streams.cli_live import produce_file
from streams.harness import WorkerProcess, wait_for, worker_settings
from streams.kafka_io import ensure_topics, free_port, start_tansu
from streams.local_redis import LocalRedisCluster
from streams.redis_store import RedisPageStore, redis_client
from streams.settings import Settings
from streams.topic_replay import read_topic


def drain(
    bootstrap, events: Path, n_events: int, n_workers: int, tmp: Path, client, **worker: object
) -> dict:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    settings = worker_settings(bootstrap, prefix, topic_partitions=2, log_level="WARNING", **worker)
    ensure_topics(settings)
    t0 = time.perf_counter()
    produce_file(settings, events)
    produce_s = time.perf_counter() - t0
    mem_before = used_memory(client)
    workers = []
    for i in range(n_workers):
        s = settings.model_copy(update={"worker_id": f"w{i}", "web_port": free_port()})
        workers.append(WorkerProcess(s, tmp / f"{prefix}-w{i}.log").start())
    try:
        for w in workers:
            w.wait_healthy(120)

        def total() -> float:
            return sum(w.metric("lookaround_priorities_out_total") for w in workers)

        def seen() -> float:
            return sum(w.metric("lookaround_events_in_total") for w in workers)

        wait_for(lambda: seen() > 0, 120, "first batch")
        started = time.perf_counter()
        start_count = seen()
        cpu0 = [w.cpu_seconds() for w in workers]
        # When every worker has had its first batch (the group settled: a worker that joins
        # later triggers a rebalance that pauses the others).
        all_busy: tuple[float, float] | None = None
        while not (seen() >= n_events and total() >= n_events * 0.999):
            if time.perf_counter() - started > 3600:
                raise TimeoutError("drain")
            if all_busy is None and all(
                w.metric("lookaround_events_in_total") > 0 for w in workers
            ):
                all_busy = (time.perf_counter(), seen())
            time.sleep(0.5)
        seconds = time.perf_counter() - started
        ended = time.perf_counter()
        cpu1 = [w.cpu_seconds() for w in workers]
        rate = (n_events - start_count) / seconds
        main_cpu = sum(b[0] - a[0] for a, b in zip(cpu0, cpu1, strict=True))
        parser_cpu = sum(b[1] - a[1] for a, b in zip(cpu0, cpu1, strict=True))
        stages = {
            k: round(
                sum(w.metric(f'lookaround_stage_seconds_total{{stage="{k}"}}') for w in workers), 1
            )
            for k in ("process", "publish", "write")
        }
        store = RedisPageStore(client, prefix=settings.redis_key_prefix)
        pages = store.pages()
        mem_after = used_memory(client)
        per_page = sample_memory(store, pages)
        out = {
            "workers": n_workers,
            "batch_size": settings.batch_size,
            "events": n_events,
            "produce_s": round(produce_s, 1),
            # `lookaround produce` (kafka-python) publishing the crawl file, before the drain
            "produce_events_per_s": round(n_events / produce_s),
            "drain_s": round(seconds, 1),
            "events_per_s": round(rate),
            "events_per_s_per_worker": round(rate / n_workers),
            # From the moment every worker was busy: the rate of a settled group.
            "all_busy_after_s": None if all_busy is None else round(all_busy[0] - started, 1),
            "settled_events_per_s_per_worker": None
            if all_busy is None or ended - all_busy[0] < 1
            else round((n_events - all_busy[1]) / (ended - all_busy[0]) / n_workers),
            # Events per CPU-second of the workers' main processes: the rate one worker would
            # sustain with a core to itself (its parser process on another).
            "cpu_main_s": round(main_cpu, 1),
            "cpu_parser_s": round(parser_cpu, 1),
            "events_per_main_cpu_s": round((n_events - start_count) / max(main_cpu, 1e-9)),
            "stage_s": stages,
            # Adaptive batches: what piled up while the last one ran, up to batch_size.
            "batches": round(sum(w.metric("lookaround_batch_events_count") for w in workers)),
            "load_avg_1m": round(os.getloadavg()[0], 1),
            "pages": pages,
            "redis_used_memory_growth_per_page": round((mem_after - mem_before) / max(pages, 1)),
            "redis_bytes_per_page_sampled": per_page,
        }
    finally:
        for w in workers:
            w.stop()
    RedisPageStore(client, prefix=settings.redis_key_prefix).delete_all()
    return out


def used_memory(client) -> int:
    """INFO used_memory of the server, or summed over a cluster's masters."""
    if isinstance(client, RedisCluster):
        nodes = [client.get_redis_connection(n) for n in client.get_primaries()]
        return sum(int(n.info("memory")["used_memory"]) for n in nodes)
    return int(client.info("memory")["used_memory"])


def sample_memory(store: RedisPageStore, pages: int, n: int = 400) -> dict:
    """Mean MEMORY USAGE of a sample of each key kind (page records ``p``, which hold the
    sibling groups too, and the groups' gains ``gg``), the mean bytes of each section of a
    page record, and the total a page costs: every record and gain, shared out over the
    pages (a page record may be only a group's home)."""
    import re

    from streams.redis_scripts import record_layout

    client = store.client
    sizes: dict[str, list[int]] = {"p": [], "gg": []}
    counts = dict.fromkeys(sizes, 0)
    sections = []
    kind_of = re.compile(rb"\{[0-9]+\}([a-z]+):")
    for key in store.keys():  # noqa: SIM118 - a store, not a dict
        m = kind_of.search(key)
        kind = m.group(1).decode() if m else ""
        if kind not in sizes:
            continue
        counts[kind] += 1
        if len(sizes[kind]) < n:
            sizes[kind].append(int(client.memory_usage(key) or 0))
            if kind == "p":
                sections.append(record_layout(client.get(key))[1])
    means = {k: round(float(np.mean(v))) if v else 0 for k, v in sizes.items()}
    total = sum(means[k] * counts[k] / max(pages, 1) for k in sizes)
    means["total"] = round(total)
    if sections:
        names = ("stats", "state", "related", "row", "group")
        mean = np.mean(sections, axis=0).round().tolist()
        means["sections"] = dict(zip(names, mean, strict=True))
    return means


def latency(
    bootstrap, events: Path, rate: float, seconds: float, tmp: Path, client, **worker: object
) -> dict:
    prefix = f"lat{uuid.uuid4().hex[:8]}"
    settings = worker_settings(bootstrap, prefix, topic_partitions=1, log_level="WARNING", **worker)
    ensure_topics(settings)
    n = int(rate * seconds)
    part = tmp / f"{prefix}.jsonl"
    with gzip.open(events, "rb") as src, open(part, "wb") as dst:
        for i, line in enumerate(src):
            if i >= n:
                break
            dst.write(line)
    w = WorkerProcess(settings, tmp / f"{prefix}.log").start()
    try:
        w.wait_healthy(120)
        time.sleep(2)  # group joined, partitions assigned
        produce_file(settings, part, rate=rate)
        wait_for(lambda: w.metric("lookaround_priorities_out_total") >= n, 300, "all scored")
        batches = w.metric("lookaround_batch_seconds_count")
        batch_s = w.metric("lookaround_batch_seconds_sum")
        batch_events = w.metric("lookaround_batch_events_sum")
        process_s = w.metric('lookaround_stage_seconds_total{stage="process"}')
        sent = {}
        for m in read_topic(settings, settings.topic_fetched):
            f = parse_fetch(m.value)
            sent[(f.url, round(f.timestamp, 3))] = m.timestamp
        lat = []
        for m in read_topic(settings, settings.topic_priorities):
            p = orjson.loads(m.value)
            ts = datetime.fromisoformat(p["fetched_at"].replace("Z", "+00:00")).timestamp()
            t_in = sent.get((p["url"], round(ts, 3)))
            if t_in is not None:
                lat.append((t_in, (m.timestamp - t_in) / 1000))
    finally:
        w.stop()
        RedisPageStore(client, prefix=settings.redis_key_prefix).delete_all()
    lat.sort()  # in the order the events were produced
    arr = np.array([seconds for _, seconds in lat])
    return {
        "rate": round(rate),
        "events": n,
        "matched": len(lat),
        "p50_s": round(float(np.percentile(arr, 50)), 3),
        "p99_s": round(float(np.percentile(arr, 99)), 3),
        "max_s": round(float(arr.max()), 3),
        # what an event waits for: the batch before its own, then its own
        "batches": int(batches),
        "events_per_batch": round(batch_events / max(batches, 1), 1),
        "batch_s_mean": round(batch_s / max(batches, 1), 3),
        "process_s_per_batch": round(process_s / max(batches, 1), 3),
        # where a high p99 comes from: the stream in tenths (a first crawl: tenth i holds
        # pages i * n / 10 to (i + 1) * n / 10), each tenth's p99
        "p99_by_tenth_s": [
            round(float(np.percentile(part, 99)), 3) for part in np.array_split(arr, 10)
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--crawls", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--embedding-drift",
        type=float,
        default=0.02,
        help="per fetch, embeddings move by noise of this norm, as real pages' do (0: frozen)",
    )
    ap.add_argument("--workers", default="1,2", help="worker counts to run, comma-separated")
    ap.add_argument(
        "--batch-size", type=int, default=None, help="the workers' batch_size (default: settings)"
    )
    ap.add_argument(
        "--parse-processes",
        type=int,
        default=None,
        help="the workers' parse_processes (default: settings)",
    )
    ap.add_argument("--latency-seconds", type=float, default=30.0, help="0: skip the latency phase")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--latency-rate",
        type=float,
        default=None,
        help="events/s (default: half the 1-worker rate)",
    )
    defaults = Settings.model_fields
    ap.add_argument(
        "--latency-batch-size",
        type=int,
        default=defaults["batch_size"].default,
        help="the worker's batch_size in the latency phase (default: settings)",
    )
    ap.add_argument(
        "--redis-url",
        default=Settings.model_fields["redis_url"].default,
        help="the workers' Redis: a server, or a node of a cluster (default: settings)",
    )
    ap.add_argument(
        "--cluster",
        action="store_true",
        help="start a local Redis Cluster (3 masters, a replica each) and use it",
    )
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="lookaround-bench-"))
    cluster = LocalRedisCluster(tmp / "redis-cluster").start() if args.cluster else None
    redis_url = cluster.url if cluster is not None else args.redis_url
    events = tmp / "crawl.jsonl.gz"
    print(f"generating {args.pages:,} pages x {args.crawls} crawls ...", flush=True)
    config = GeneratorConfig(
        pages=args.pages, crawls=args.crawls, seed=args.seed, embedding_drift=args.embedding_drift
    )
    info = write_events(events, config)
    n_events = info["events"]
    port = free_port()
    broker = start_tansu(port, tmp / "tansu.log")
    client = redis_client(Settings(redis_url=redis_url))
    results: dict = {"events": n_events, "pages": args.pages, "crawls": args.crawls, "runs": []}
    try:
        bootstrap = f"127.0.0.1:{port}"
        for n in [int(x) for x in args.workers.split(",") if x.strip()]:
            extra: dict = {"redis_url": redis_url}
            if args.batch_size is not None:
                extra["batch_size"] = args.batch_size
            if args.parse_processes is not None:
                extra["parse_processes"] = args.parse_processes
            r = drain(bootstrap, events, n_events, n, tmp, client, **extra)
            results["runs"].append(r)
            print(orjson.dumps(r).decode(), flush=True)
        if args.latency_seconds > 0:
            rate = args.latency_rate or results["runs"][0]["events_per_s_per_worker"] / 2
            results["latency"] = latency(
                bootstrap,
                events,
                rate,
                args.latency_seconds,
                tmp,
                client,
                redis_url=redis_url,
                batch_size=args.latency_batch_size,
            )
            print(orjson.dumps(results["latency"]).decode(), flush=True)
    finally:
        broker.terminate()
        broker.wait(10)
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    if results["runs"]:
        head = f"{'workers':>8} {'events/s':>10} {'per worker':>11} {'bytes/page':>11}"
        print(f"{head} {'produced/s':>11}")
    for r in results["runs"]:
        print(
            f"{r['workers']:>8} {r['events_per_s']:>10,} {r['events_per_s_per_worker']:>11,}"
            f" {r['redis_bytes_per_page_sampled']['total']:>11,}"
            f" {r['produce_events_per_s']:>11,}"
        )
    lat = results.get("latency")
    if lat:
        print(f"latency at {lat['rate']:,} events/s: p50 {lat['p50_s']} s, p99 {lat['p99_s']} s")
        tenths = ", ".join(f"{p99:.2f}" for p99 in lat["p99_by_tenth_s"])
        print(f"  p99 in each tenth of the stream: {tenths} s")
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
