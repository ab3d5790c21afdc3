"""Events files: the reader process gives exactly what in-process reading gives."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batch.generate import GeneratorConfig, generate_events
from batch.reader import BOM, _lines, read_batches
from online.errors import InputError
from online.stores import Neighbours, stats_from_bytes, stats_to_bytes


def test_parallel_reader_equals_in_process(tmp_path: Path) -> None:
    events = list(generate_events(GeneratorConfig(pages=120, crawls=3, seed=5)))
    lines = [orjson.dumps(e) for e in events]
    lines.insert(7, b'{"url": 1}')
    lines.insert(200, b"nope")
    path = tmp_path / "e.jsonl.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")
    plain = list(read_batches(path, batch_size=50))
    forked = list(read_batches(path, batch_size=50, parallel=True))
    assert [b.fetches for b in forked] == [b.fetches for b in plain]
    assert [b.rejects for b in forked] == [b.rejects for b in plain]
    assert sum(len(b.fetches) for b in plain) == len(events)
    assert [r.line for b in plain for r in b.rejects] == [8, 201]
    assert sum(b.lines for b in plain) == len(lines)
    assert plain[-1].position == path.stat().st_size


def test_reader_failure_is_raised_in_the_parent(tmp_path: Path) -> None:
    """A corrupt file is the user's problem: its message crosses from the reader process as
    it is. Anything else fails loudly with the reader's traceback."""
    path = tmp_path / "broken.jsonl.gz"
    path.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(InputError, match=r"broken\.jsonl\.gz has corrupt compressed data"):
        list(read_batches(path, parallel=True))
    with pytest.raises(RuntimeError, match=r"events reader failed:\n(.|\n)*IsADirectoryError"):
        list(read_batches(tmp_path, parallel=True))


def test_a_reader_that_dies_silently_is_an_error_not_a_hang(tmp_path: Path) -> None:
    """A reader killed between batches (OOM killer, an operator) sends nothing: the parent
    notices that it is gone instead of waiting on its queue forever."""
    import multiprocessing as mp
    import os
    import signal

    events = list(generate_events(GeneratorConfig(pages=400, crawls=8, seed=1)))
    path = tmp_path / "e.jsonl.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    batches = read_batches(path, batch_size=10, parallel=True)
    next(batches)
    (reader,) = [p for p in mp.active_children() if p.name == "events-reader"]
    os.kill(reader.pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match="events reader exited with code -9"):
        list(batches)


def test_a_consumer_that_stops_early_leaves_no_reader_behind(tmp_path: Path) -> None:
    """Batches are taken off the pipe by a thread ahead of the pipeline; a consumer that
    stops before the file's end (an error in the pipeline, a Ctrl-C) still ends that thread
    and the reader process, with batches still on their way."""
    import multiprocessing as mp
    import threading

    events = list(generate_events(GeneratorConfig(pages=400, crawls=8, seed=1)))
    path = tmp_path / "e.jsonl.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    batches = read_batches(path, batch_size=10, parallel=True)
    first = next(batches)
    assert len(first.fetches) == 10
    assert any(t.name == "events-receiver" for t in threading.enumerate())
    batches.close()
    assert not any(t.name == "events-receiver" for t in threading.enumerate())
    assert not [p for p in mp.active_children() if p.name == "events-reader"]


def test_neighbours_and_stats_bytes_round_trip() -> None:
    nb = Neighbours(np.array([5, -7, 2**62], np.int64), np.array([0.5, 0.3, 0.2], np.float32), 99)
    back = Neighbours.from_bytes(nb.to_bytes())
    assert back.ids.tolist() == nb.ids.tolist() and back.index_size == 99
    assert np.array_equal(back.weights, nb.weights)
    row = np.arange(16, dtype=np.float32)
    row[3] = np.nan
    assert np.array_equal(stats_from_bytes(stats_to_bytes(row)), row, equal_nan=True)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    st.booleans(),
    st.integers(min_value=1, max_value=40),
)
def test_chunked_lines_equal_line_iteration(
    lines: list[bytes], newline_at_end: bool, chunk: int
) -> None:
    """Lines cut across chunk boundaries, blank lines and a missing last newline come out as
    iterating the file by lines would give them (without the newline); a byte order mark
    starting the data is left out."""
    data = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    expected = [line.rstrip(b"\n") for line in io.BytesIO(data.removeprefix(BOM))]
    assert list(_lines(io.BytesIO(data), chunk_size=chunk)) == expected


def test_reader_line_numbers_across_chunks_of_a_gzip_file(tmp_path: Path) -> None:
    """Line numbers of rejects stay right when events span the reader's read chunks."""
    events = list(generate_events(GeneratorConfig(pages=300, crawls=4, seed=2)))
    lines = [orjson.dumps(e) for e in events]
    bad = b'{"url": "ftp://x.org/", "fetched_at": 1, "outlinks": []}'
    lines.insert(3, bad)
    lines.insert(700, bad)
    lines.append(bad)  # the last line, with no newline after it
    lines.insert(10, b"")  # blank: counted as a line number, not as an event
    path = tmp_path / "e.jsonl.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b"\n".join(lines))  # no newline at the end
    batches = list(read_batches(path, batch_size=100))
    numbers = [r.line for b in batches for r in b.rejects]
    assert numbers == [4, 702, len(lines)]
    assert all(r.field == "url" for b in batches for r in b.rejects)
    assert sum(len(b.fetches) for b in batches) == len(events)
