"""Parse throughput: one fetched-page event (JSON line) to a `Fetch` (target: <= 60 us/event).

Times three paths on the same lines, each with a cold link cache and then warm. Cold: the
cache is emptied and kept to one entry for the pass, so no URL is found in it, as in a large
crawl, whose millions of distinct outlink URLs the 1M-entry cache cannot hold (emptying it
once is not enough: within a small crawl's pass, links repeat and it warms up). Warm: the
cache holds every URL of the lines (a second pass).

* ``before``: ``prepare(parse_event(line))`` with the urlsplit-per-URL link parser, i.e. the
  path as it was before `parse_fetch` had a fast path;
* ``validating``: ``prepare(parse_event(line))`` as it is now (the slow path, which decides
  every event the fast path declines);
* ``parse_fetch``: what the reader and the live workers call.

Each figure is the best of ``--repeat`` passes (the machine may be shared). Checks that
``parse_fetch`` equals the validating path on every line and counts the lines its fast path
declines. Generates a 20,000-page x 3-crawl crawl unless given ``--events``; by default the
first 20,000 lines are timed.

    python bench/parse_events.py [--events FILE] [--skip N] [--count N] [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import itertools
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

import online.links as links
from batch.generate import GeneratorConfig, write_events
from online.events import DEFAULT_LIMITS, EventError, parse_event
from online.fetch import Fetch, _fast_fetch, parse_fetch, prepare

TARGET_US = 60.0


def _read(path: Path, skip: int, count: int) -> list[bytes]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as lines:
        return [line for line in itertools.islice(lines, skip, skip + count) if line.strip()]


@contextmanager
def _no_link_cache() -> Iterator[None]:
    """Every URL misses the link cache: it is emptied and holds one entry at most."""
    size = links.CACHE_SIZE
    links.CACHE_SIZE = 1
    links._CACHE.clear()
    try:
        yield
    finally:
        links.CACHE_SIZE = size
        links._CACHE.clear()


@contextmanager
def _slow_link_parser() -> Iterator[None]:
    """The link parser as it was: urlsplit and urlunsplit for every URL."""
    fast = links._parse
    links._parse = links._parse_slow
    try:
        yield
    finally:
        links._parse = fast


def _validating(line: bytes) -> Fetch | EventError:
    try:
        return prepare(parse_event(line))
    except EventError as err:
        return err


def _parse_fetch(line: bytes) -> Fetch | EventError:
    try:
        return parse_fetch(line)
    except EventError as err:
        return err


def _time(parse: Callable[[bytes], object], lines: list[bytes]) -> tuple[float, list[object]]:
    """us per line, and the results; one collection before so earlier garbage is not billed."""
    gc.collect()
    started = time.perf_counter()
    results = [parse(line) for line in lines]
    return (time.perf_counter() - started) / len(lines) * 1e6, results


def _cold_warm(
    parse: Callable[[bytes], object], lines: list[bytes], repeat: int
) -> tuple[float, float, list]:
    """Best of ``repeat`` (cold, warm) passes: the machine is shared, the best pass is the one
    least disturbed."""
    colds, warms = [], []
    for _ in range(repeat):
        with _no_link_cache():
            cold, results = _time(parse, lines)
        _time(parse, lines)  # fills the cache
        warm, _ = _time(parse, lines)
        colds.append(cold)
        warms.append(warm)
    return min(colds), min(warms), results


def _same(a: object, b: object) -> bool:
    if isinstance(a, EventError) and isinstance(b, EventError):
        return (a.field, a.reason) == (b.field, b.reason)
    return a == b


def _fast_fetch_declines(line: bytes) -> bool:
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return True
    if type(data) is not dict:
        return True
    limits = DEFAULT_LIMITS
    fetch = _fast_fetch(data, 192, 100_000, limits.max_url_length, limits.earliest, limits.latest())
    return fetch is None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=Path, help="JSON Lines events file (.gz or plain)")
    parser.add_argument("--skip", type=int, default=0, help="lines to skip first")
    parser.add_argument("--count", type=int, default=20_000, help="lines to time")
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--crawls", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3, help="passes per path; best is shown")
    args = parser.parse_args()
    events = args.events
    if events is None:
        events = Path(tempfile.mkdtemp(prefix="lookaround-bench-")) / "crawl.jsonl"
        write_events(events, GeneratorConfig(pages=args.pages, crawls=args.crawls, seed=0))
    lines = _read(events, args.skip, args.count)
    declined = sum(_fast_fetch_declines(line) for line in lines)
    print(f"{len(lines):,} events from {events} (fast path declines {declined:,})")

    with _slow_link_parser():
        before_cold, before_warm, _ = _cold_warm(_validating, lines, args.repeat)
    slow_cold, slow_warm, expected = _cold_warm(_validating, lines, args.repeat)
    new_cold, new_warm, got = _cold_warm(_parse_fetch, lines, args.repeat)
    mismatches = sum(not _same(a, b) for a, b in zip(got, expected, strict=True))

    rows = [
        ("before", before_cold, before_warm),
        ("validating", slow_cold, slow_warm),
        ("parse_fetch", new_cold, new_warm),
    ]
    print(f"{'us/event':<12} {'cold':>8} {'warm':>8}")
    for name, cold, warm in rows:
        print(f"{name:<12} {cold:8.1f} {warm:8.1f}")
    print(
        f"speed-up over before: cold {before_cold / new_cold:.1f}x, warm "
        f"{before_warm / new_warm:.1f}x; over validating: cold {slow_cold / new_cold:.1f}x, "
        f"warm {slow_warm / new_warm:.1f}x"
    )
    print(
        f"parse_fetch / {TARGET_US:.0f} us target: cold {new_cold / TARGET_US:.2f}, "
        f"warm {new_warm / TARGET_US:.2f} (<= 1 meets it)"
    )
    print(f"results equal to the validating path: {len(lines) - mismatches:,}/{len(lines):,}")
    if mismatches:
        raise SystemExit(f"{mismatches} results differ from prepare(parse_event(line))")


if __name__ == "__main__":
    main()
