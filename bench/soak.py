"""Soak: one live worker for N minutes at a fixed event rate; its memory (RSS) over time.

    python bench/soak.py                          # 30 minutes at 200 events/s
    python bench/soak.py --minutes 5 --rate 1000 --json soak.json

A local Tansu broker (started here) and the Redis at 127.0.0.1:6379 (its own key prefix,
deleted after). The events are a generated crawl of ``--pages`` pages, replayed pass after
pass with its times shifted by the crawl's span (every pass is newer, as a crawler that keeps
going; the last pass ends before now), so the set of pages, and with it the size of the FAISS
replica and of the Redis state, stops growing after the first pass: what still grows is the
worker's own memory.

Every ``--every`` seconds: elapsed time, the worker's RSS (VmRSS of its process), priorities
out, consumer lag and the broker's RSS. The broker is the limit of a long soak on one machine:
Tansu's memory storage keeps every message of both topics (it has no retention and no
DeleteRecords) and slowed to a few events a second once it held about 1.2 million (4 GB, after
22 minutes at 500 events/s), so the default rate keeps 30 minutes below that.

At the end: RSS at warm-up and at the end, and the growth in MB/min
after warm-up (a least-squares line through the samples after ``--warmup`` seconds, by default
the first pass over the crawl and a minute more: until then the pages, the FAISS replica and
the Redis state still grow with every new page; and one
through each minute's lowest sample: RSS saws up and down with every batch). A worker that
cannot keep up (lag growing: a busy machine) takes ever larger batches, which raises the
peaks; the minimums are what stays.
"""

from __future__ import annotations

import argparse
import gzip
import math
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batch.generate import GeneratorConfig, write_events
from streams.harness import WorkerProcess, worker_settings
from streams.kafka_io import ensure_topics, free_port, kafka_python_options, start_tansu
from streams.redis_store import RedisPageStore


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def describe_exit(worker: WorkerProcess, tail_lines: int = 20) -> str:
    """Why the worker is gone: its exit status or the signal that ended it, the kernel's word
    on an out-of-memory kill where it can be read, and the last lines of its log."""
    code = worker.proc.returncode  # type: ignore[union-attr]
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
    lines = [f"worker gone: {how}"]
    try:
        kernel = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5).stdout
        lines += [f"dmesg: {x}" for x in kernel.splitlines() if "oom" in x.lower()][-3:]
    except (OSError, subprocess.SubprocessError):
        pass
    log = worker.log.read_text(errors="replace").splitlines() if worker.log.exists() else []
    lines += [f"log: {x}" for x in log[-tail_lines:]] or ["log: (empty)"]
    return "\n".join(lines)


def _ts(value: str | float) -> float:
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def load_base(pages: int, crawls: int, seed: int, tmp: Path) -> tuple[list[dict], float]:
    """The generated crawl's events (time order as written) and its span in seconds."""
    path = tmp / "crawl.jsonl.gz"
    write_events(path, GeneratorConfig(pages=pages, crawls=crawls, seed=seed))
    with gzip.open(path, "rb") as fh:
        docs = [orjson.loads(line) for line in fh if line.strip()]
    times = [_ts(d["fetched_at"]) for d in docs]
    for d, t in zip(docs, times, strict=True):
        d["fetched_at"] = t
    return docs, max(times) - min(times) + 7 * 86_400.0


def produce(
    settings, docs: list[dict], span: float, rate: float, seconds: float, stop: threading.Event
) -> int:  # type: ignore[no-untyped-def]
    """Produce ``rate`` events/s for ``seconds`` (in 0.1 s ticks); returns how many."""
    from kafka import KafkaProducer

    total = int(rate * seconds)
    passes = total // len(docs) + 1
    first = min(d["fetched_at"] for d in docs)
    shift0 = time.time() - 86_400.0 - passes * span - first  # the last pass ends before now
    producer = KafkaProducer(linger_ms=5, acks=1, **kafka_python_options(settings))
    sent, started = 0, time.monotonic()
    try:
        while sent < total and not stop.is_set():
            due = min(total, int((time.monotonic() - started) * rate))
            while sent < due:
                doc = dict(docs[sent % len(docs)])
                shifted = doc["fetched_at"] + shift0 + (sent // len(docs)) * span
                doc["fetched_at"] = datetime.fromtimestamp(shifted, UTC).isoformat()
                producer.send(settings.topic_fetched, key=doc["url"].encode(),
                              value=orjson.dumps(doc))  # fmt: skip
                sent += 1
            time.sleep(0.1)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=5)
    return sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=200.0, help="events per second")
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--crawls", type=int, default=4, help="crawls in one pass")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds left out of the slope (default: the first pass over the crawl + 60)",
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    docs, span = load_base(args.pages, args.crawls, args.seed, tmp)
    port = free_port()
    broker = start_tansu(port, tmp / "tansu.log")
    prefix = f"soak{uuid.uuid4().hex[:8]}"
    settings = worker_settings(f"127.0.0.1:{port}", prefix, log_level="WARNING")
    seconds = args.minutes * 60
    samples: list[tuple[float, float, float, float, float]] = []
    died: str | None = None
    stop = threading.Event()
    worker = WorkerProcess(settings, tmp / "worker.log")
    try:
        ensure_topics(settings)
        worker.start()
        worker.wait_healthy(120)
        pid = worker.proc.pid  # type: ignore[union-attr]
        sent: list[int] = []
        producer = threading.Thread(
            target=lambda: sent.append(produce(settings, docs, span, args.rate, seconds, stop)),
            daemon=True,
        )
        started = time.monotonic()
        producer.start()
        header = f"{'t_s':>6} {'rss_mb':>8} {'priorities':>11} {'lag':>7} {'broker_mb':>9}"
        print(header, flush=True)
        while time.monotonic() - started < seconds:
            time.sleep(args.every - (time.monotonic() - started) % args.every)
            t = time.monotonic() - started
            row = (
                t,
                rss_mb(pid),
                worker.metric("lookaround_priorities_out_total"),
                worker.metric("lookaround_consumer_lag"),
                rss_mb(broker.pid),
            )
            if not worker.alive():
                died = describe_exit(worker)
                print(died, flush=True)
                break
            samples.append(row)
            print(
                f"{row[0]:6.0f} {row[1]:8.1f} {row[2]:11,.0f} {row[3]:7,.0f} {row[4]:9.0f}",
                flush=True,
            )
        stop.set()
        producer.join(60)  # its flush: before the broker goes
    finally:
        stop.set()
        worker.stop()
        broker.kill()
        RedisPageStore(redis.Redis(), prefix=settings.redis_key_prefix).delete_all()
    arr = np.array(samples)
    warmup = args.warmup if args.warmup is not None else len(docs) / args.rate + 60.0
    after = arr[arr[:, 0] >= warmup]
    slope = float(np.polyfit(after[:, 0] / 60, after[:, 1], 1)[0]) if len(after) > 2 else math.nan
    # RSS saws up and down with each batch's allocations: the minimum of each minute shows
    # what stays.
    minute = (after[:, 0] // 60).astype(int)
    whole = [m for m in np.unique(minute) if (minute == m).sum() >= 3]  # not a last sample alone
    floors = np.array([[m, after[minute == m, 1].min()] for m in whole])
    floor_slope = (
        float(np.polyfit(floors[:, 0], floors[:, 1], 1)[0]) if len(floors) > 2 else math.nan
    )
    summary = {
        "worker_exit": died,
        "minutes": args.minutes,
        "rate": args.rate,
        "pages": args.pages,
        "events_sent": sent[0] if sent else None,
        "priorities_out": int(arr[-1, 2]),
        "warmup_seconds": round(warmup),
        "rss_mb_at_warmup": round(float(after[0, 1]), 1) if len(after) else None,
        "rss_mb_end": round(float(arr[-1, 1]), 1),
        "rss_mb_max": round(float(arr[:, 1].max()), 1),
        "growth_mb_per_min_after_warmup": round(slope, 2),
        "rss_mb_minute_minimums": [round(float(v), 1) for v in floors[:, 1]] if len(floors) else [],
        "growth_mb_per_min_of_minute_minimums": round(floor_slope, 2),
        "lag_end": int(arr[-1, 3]),
        "broker_mb_end": round(float(arr[-1, 4]), 1),
        "samples": [[round(float(v), 1) for v in row] for row in samples],
    }
    print(orjson.dumps({k: v for k, v in summary.items() if k != "samples"}).decode())
    if args.json:
        args.json.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
