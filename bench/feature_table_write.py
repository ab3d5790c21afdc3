"""Writing features.parquet: dictionary pages on every column against on the URLs only.

Replays a generated crawl (or takes a run's ``features.parquet``), then writes its rows again
in batches of 2,000, as the replay's outputs writer does, with zstd both ways: dictionary
encoding on every column (pyarrow's default) and on the URL column only (what
`streams.feature_table.FeatureTable` writes). Prints the best of ``--repeat`` write times, the
file sizes and their ratios, and checks that both files read back the same table.

    python bench/feature_table_write.py [--pages 20000] [--crawls 6] [--features FILE]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from batch.generate import GeneratorConfig, write_events
from streams.feature_table import DICTIONARY_COLUMNS
from streams.replay import replay

BATCH_ROWS = 2_000


def _write(table: pa.Table, path: Path, dictionary: bool | list[str]) -> float:
    """Seconds to write ``table`` to ``path`` in batches of `BATCH_ROWS`."""
    started = time.perf_counter()
    with pq.ParquetWriter(path, table.schema, compression="zstd", use_dictionary=dictionary) as w:
        for batch in table.to_batches(BATCH_ROWS):
            w.write_table(pa.Table.from_batches([batch], table.schema))
    return time.perf_counter() - started


def _features(args: argparse.Namespace, work: Path) -> Path:
    if args.features is not None:
        return args.features
    events = work / "events.jsonl.gz"
    write_events(events, GeneratorConfig(pages=args.pages, crawls=args.crawls, seed=0))
    replay(events, work / "run")
    return work / "run" / "features.parquet"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--crawls", type=int, default=6)
    parser.add_argument("--features", type=Path, help="a run's features.parquet to rewrite")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        table = pq.read_table(_features(args, work))
        expected = table.to_pandas()
        figures = {}
        for label, dictionary in (("every column", True), ("URLs only", DICTIONARY_COLUMNS)):
            path = work / f"{label}.parquet"
            seconds = min(_write(table, path, dictionary) for _ in range(args.repeat))
            figures[label] = (seconds, path.stat().st_size)
            if not pq.read_table(path).to_pandas().equals(expected):  # NaN == NaN
                raise SystemExit(f"{label}: the file does not read back the table written")
        shape = f"{table.num_rows:,} rows × {table.num_columns} columns"
        print(f"{shape}, zstd, batches of {BATCH_ROWS:,}")
        for label, (seconds, size) in figures.items():
            print(f"  dictionary on {label:12s} {seconds:6.3f} s  {size / 1e6:7.2f} MB")
        (every_s, every_b), (url_s, url_b) = figures.values()
        print(f"URLs only: {every_s / url_s:.2f} x faster, {url_b / every_b:.2f} x the size")


if __name__ == "__main__":
    main()
