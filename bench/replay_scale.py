"""The embedded replay at a million pages: events/s, peak memory and memory per page.

Generates (or reuses, in ``--work``) paper-like crawls of ``--crawls`` rounds whose embeddings
drift a little at every fetch (``--embedding-drift``, as real pages' do) at ``--small`` and
``--pages`` pages, and a text-only crawl at ``--pages`` (embedded by the hashing embedder),
replays each with ``lookaround replay`` (the default scorer) in a child process, and prints
per run: events/s, the peak resident memory of the replay's processes together (the pipeline,
its outputs writer and its events reader; sampled from /proc every half second), that peak
per page, and each process's own peak (the pipeline's first). Floors: peak memory at most
4 GB, and events/s at ``--pages`` at least 0.8 x at ``--small``.

    python bench/replay_scale.py                          # 100,000 and 1,000,000 pages x 5
    python bench/replay_scale.py --pages 300000 --no-text
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from batch.generate import GeneratorConfig, write_events

PEAK_FLOOR_BYTES = 4 * 1024**3
RATIO_FLOOR = 0.8
_PAGE = os.sysconf("SC_PAGE_SIZE")
#: smaller than this, a helper is multiprocessing's resource tracker: left out of the list
_TRACKER = 32 * 1024**2


@dataclass
class Run:
    name: str
    pages: int
    events: int
    seconds: float
    peak_bytes: int
    #: each process's own peak: the pipeline's first, then its helpers' in the order started
    process_peaks: list[int]
    #: the related-page searches, and the index's IVF lists and lists probed at the end
    searches: int = 0
    lists: int = 0
    probes: int = 0
    #: IVF upserts that kept their list unranked, and of those the ones taken from a search
    lists_kept: int = 0
    lists_from_search: int = 0

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    def line(self) -> str:
        each = ", ".join(f"{p / 1024**2:,.0f}" for p in self.process_peaks)
        return (
            f"{self.name:28s} {self.events:>10,} events {self.rate:>8,.0f} events/s  "
            f"peak {self.peak_bytes / 1024**3:5.2f} GB  "
            f"{self.peak_bytes / self.pages:>6,.0f} B/page  (MB a process: {each}); "
            f"{self.searches:,} searches, {self.probes} of {self.lists} lists probed, "
            f"{self.lists_kept:,} upserts kept their list ({self.lists_from_search:,} from a "
            "search)"
        )


def tree_rss(pid: int) -> dict[int, int]:
    """Resident bytes of a process and of each of its descendants, by pid."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    out, todo = {}, [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/statm") as fh:
                out[current] = int(fh.read().split()[1]) * _PAGE
        except OSError:
            continue
        todo.extend(children.get(current, []))
    return out


def lookaround_command() -> list[str]:
    """The ``lookaround`` command as a user runs it: the installed console script beside this
    Python (its entry point, `streams.entry`, keeps the replay's helper processes from loading
    the whole CLI), else the same entry point through ``-c``. Not ``-m streams.cli``: each
    helper would import that module again, the whole CLI, about 250 MB a helper."""
    script = Path(sys.executable).with_name("lookaround")
    if script.exists():
        return [str(script)]
    entry = "import sys; from streams.entry import app; sys.argv[0] = 'lookaround'; app()"
    return [sys.executable, "-c", entry]


def replay(events: Path, out: Path, name: str, pages: int) -> Run:
    """``lookaround replay`` in a child process, its memory sampled as it runs."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [*lookaround_command(), "replay", str(events), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    peak = 0
    peaks: dict[int, int] = {}
    while child.poll() is None:
        sizes = tree_rss(child.pid)
        peak = max(peak, sum(sizes.values()))
        for process, size in sizes.items():
            peaks[process] = max(peaks.get(process, 0), size)
        time.sleep(0.5)
    if child.returncode:
        raise SystemExit(f"the replay of {events} failed (exit {child.returncode})")
    summary = json.loads((out / "summary.json").read_text())
    seconds = float(summary.get("seconds") or (time.perf_counter() - started))
    helpers = sorted(p for p in peaks if p != child.pid)  # pids rise in start order
    each = [peaks.get(child.pid, 0)] + [peaks[p] for p in helpers if peaks[p] > _TRACKER]
    index = (
        summary.get(k, 0)
        for k in (
            "neighbour_searches",
            "index_lists",
            "index_probes",
            "index_lists_kept",
            "index_lists_from_search",
        )
    )
    return Run(name, pages, int(summary["events_read"]), seconds, peak, each, *index)


def crawl(work: Path, pages: int, crawls: int, drift: float, content: str) -> Path:
    path = work / f"crawl-{pages}-{crawls}-{content}-{drift}.jsonl.gz"
    if not path.exists():
        config = GeneratorConfig(
            pages=pages, crawls=crawls, seed=3, content=content, embedding_drift=drift
        )
        write_events(path, config)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=1_000_000)
    ap.add_argument("--small", type=int, default=100_000)
    ap.add_argument("--crawls", type=int, default=5)
    ap.add_argument("--embedding-drift", type=float, default=0.02)
    ap.add_argument("--no-text", action="store_true", help="leave out the text-only crawl")
    ap.add_argument("--work", type=Path, default=Path("runs/scale"), help="crawls and runs")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    runs = []
    plan = [(args.small, "embedding"), (args.pages, "embedding")]
    plan += [] if args.no_text else [(args.pages, "text")]
    for pages, content in plan:
        events = crawl(args.work, pages, args.crawls, args.embedding_drift, content)
        name = f"{pages:,} pages, {content}"
        runs.append(replay(events, args.work / f"run-{pages}-{content}", name, pages))
        print(runs[-1].line(), flush=True)
    small, large = runs[0], runs[1]
    ratio = large.rate / small.rate
    peak = max(r.peak_bytes for r in runs)
    print(
        f"events/s at {args.pages:,} pages / at {args.small:,}: {ratio:.2f} (floor {RATIO_FLOOR}); "
        f"peak memory {peak / 1024**3:.2f} GB (floor {PEAK_FLOOR_BYTES / 1024**3:.0f} GB)"
    )
    return 0 if ratio >= RATIO_FLOOR and peak <= PEAK_FLOOR_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
