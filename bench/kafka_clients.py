"""The kafka-python side of the project against a real broker (Tansu): publishing a crawl file
(`lookaround produce`'s `produce_file`) and reading a topic back whole (`lookaround
replay-topic`'s `read_topic`, as the evaluation of a replayed topic does), in events/s.

    python bench/kafka_clients.py                  # 50,000 pages x 2 crawls
    python bench/kafka_clients.py --compare        # and with kafka-python's pure-Python CRC

kafka-python checks every record batch's CRC-32C, producing and consuming; without the
``crc32c`` package (a dependency of the project) it computes them in pure Python. ``--compare``
runs the same in a child process that cannot import ``crc32c`` and prints the ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if "--pure-python-crc" in sys.argv:
    sys.modules["crc32c"] = None  # type: ignore[assignment]  # kafka-python then falls back

from kafka.record import util

from batch.generate import GeneratorConfig, write_events
from streams.cli_live import produce_file
from streams.harness import worker_settings
from streams.kafka_io import ensure_topics, free_port, start_tansu
from streams.topic_replay import read_topic


def measure(events: Path, tmp: Path) -> dict:
    """Events/s of producing ``events`` to a fresh broker and of reading its topic back."""
    port = free_port()
    broker = start_tansu(port, tmp / f"tansu-{port}.log")
    try:
        settings = worker_settings(
            f"127.0.0.1:{port}", "kbench", topic_partitions=2, log_level="WARNING"
        )
        ensure_topics(settings)
        t0 = time.perf_counter()
        produced = produce_file(settings, events)
        t1 = time.perf_counter()
        read = len(read_topic(settings, settings.topic_fetched))
        t2 = time.perf_counter()
    finally:
        broker.terminate()
        broker.wait(10)
    if read != produced:
        raise SystemExit(f"read {read:,} records back of {produced:,} produced")
    return {
        "crc": "C (crc32c)" if util.crc32c_c is not None else "pure Python",
        "events": produced,
        "produce_events_per_s": round(produced / (t1 - t0)),
        # read_topic waits `idle_seconds` (1 s) at the end to be sure nothing more comes
        "read_topic_events_per_s": round(read / (t2 - t1)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pages", type=int, default=50_000)
    ap.add_argument("--crawls", type=int, default=2)
    ap.add_argument("--compare", action="store_true", help="also with the pure-Python CRC")
    ap.add_argument("--pure-python-crc", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--events", type=Path, help=argparse.SUPPRESS)  # the parent's crawl
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lookaround-kafka-bench-"))
    try:
        if args.events is not None:  # the --compare child: one JSON line
            print(json.dumps(measure(args.events, tmp)))
            return
        events = tmp / "crawl.jsonl.gz"
        write_events(events, GeneratorConfig(pages=args.pages, crawls=args.crawls, seed=0))
        runs = [measure(events, tmp)]
        if args.compare:
            child = [sys.executable, __file__, "--pure-python-crc", "--events", str(events)]
            out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{'CRC-32C':<12} {'events':>9} {'produce/s':>10} {'read_topic/s':>13}")
    for r in runs:
        print(
            f"{r['crc']:<12} {r['events']:>9,} {r['produce_events_per_s']:>10,}"
            f" {r['read_topic_events_per_s']:>13,}"
        )
    if len(runs) == 2:
        fast, slow = runs
        produce = fast["produce_events_per_s"] / slow["produce_events_per_s"]
        read = fast["read_topic_events_per_s"] / slow["read_topic_events_per_s"]
        print(f"C against pure Python: produce {produce:.1f} x, read_topic {read:.1f} x")


if __name__ == "__main__":
    main()
