"""features.parquet (streams/feature_table.py): every scored fetch's row, labelled by its
page's next fetch, in the order the labels arrive, the unlabelled rest last, in the order
their pages were last fetched; whatever the batches, and with the values the pipeline left
unestimated (None) null in the file."""

from __future__ import annotations

import pickle
import random
from dataclasses import fields
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from online.candidates import CANDIDATES
from online.features import feature_names
from online.history import Interval
from online.scored import ScoredColumns
from streams.feature_table import FeatureTable, candidate_column

HISTORY = 2
WIDTH = len(feature_names(HISTORY))


def stream(seed: int, fetches: int, pages: int) -> list[dict]:
    """Fetches of a few pages in time order, with some values, crawls and intervals None."""
    rng = random.Random(seed)
    out = []
    seen: set[int] = set()
    for k in range(fetches):
        page = rng.randrange(pages)
        first = page not in seen
        seen.add(page)
        out.append(
            {
                "url": f"https://a.org/{page}",
                "page_id": 10**12 + page,
                "crawl": None if rng.random() < 0.1 else k // pages,
                "status": rng.choice([200, 200, 200, 404]),
                "timestamp": 1_700_000_000 + 3600.0 * k + 0.25,
                "interval": None
                if first or rng.random() < 0.2
                else Interval(rng.randrange(5), rng.randrange(3), rng.random() < 0.5, 1.5 + k),
                "values": (
                    rng.random(),
                    None if rng.random() < 0.3 else rng.random() * 4,
                    rng.random(),
                    rng.random(),
                    0.1,
                ),
                "candidate": None if rng.random() < 0.3 else rng.random(),
                "row": [float(k), *[rng.random() for _ in range(WIDTH - 1)]],
            }
        )
    return out


def columns(events: list[dict]) -> ScoredColumns:
    n = len(events)
    candidates = {
        name: np.array([np.nan if e["candidate"] is None else e["candidate"] + j for e in events])
        for j, name in enumerate(CANDIDATES[:3])
    }
    return ScoredColumns(
        urls=[e["url"] for e in events],
        page_ids=[e["page_id"] for e in events],
        crawls=[e["crawl"] for e in events],
        statuses=[e["status"] for e in events],
        timestamps=[e["timestamp"] for e in events],
        intervals=[e["interval"] for e in events],
        matrix=np.array([e["row"] for e in events], dtype=np.float64).reshape(n, WIDTH),
        fetched_at=["" for _ in events],
        scored_at="",
        values=[e["values"] for e in events],
        next_fetch_at=[None] * n,
        reasons=[[] for _ in events],
        scorer={},
        candidates=candidates,
    )


def expected_rows(events: list[dict]) -> list[dict]:
    """The file's rows by the rule, fetch by fetch (the reference the table is held to)."""
    pending: dict[int, tuple[int, dict]] = {}  # page -> (position of its latest fetch, fetch)
    labelled = []
    for at, event in enumerate(events):
        before = pending.get(event["page_id"])
        if before is not None:
            labelled.append((before[1], event))
        pending[event["page_id"]] = (at, event)
    rest = [(e, None) for _, e in sorted(pending.values(), key=lambda item: item[0])]
    return [_row(row, label) for row, label in labelled + rest]


def _row(event: dict, label: dict | None) -> dict:
    interval = label["interval"] if label else None
    f32 = np.float32
    score, internal, external, p_new, _ = event["values"]
    row = {
        "url": event["url"],
        "page_id": event["page_id"],
        "crawl": event["crawl"],
        "fetched_at_ms": round(event["timestamp"] * 1000),
        "status": event["status"],
        "score": score,
        "p_new": p_new,
        "expected_new_internal": internal,
        "expected_new_external": external,
        "first_feature": float(f32(event["row"][0])),
        "label_new_internal": interval.new_internal if interval else None,
        "label_new_external": interval.new_external if interval else None,
        "label_interval_days": float(f32(interval.days)) if interval else None,
        "label_fetched_at_ms": round(label["timestamp"] * 1000) if label else None,
    }
    for j, name in enumerate(CANDIDATES):
        value = event["candidate"]
        known = j < 3 and value is not None
        row[candidate_column(name)] = float(f32(value + j)) if known else None
    return row


def read_rows(path: Path) -> list[dict]:
    table = pq.read_table(path)
    names = feature_names(HISTORY)
    rows = []
    for record in table.to_pylist():
        record["fetched_at_ms"] = round(record.pop("fetched_at").timestamp() * 1000)
        stamp = record.pop("label_fetched_at")
        record["label_fetched_at_ms"] = None if stamp is None else round(stamp.timestamp() * 1000)
        record["first_feature"] = record[names[0]]
        for name in names:
            del record[name]
        rows.append(record)
    return rows


@pytest.mark.parametrize("batch_size", [1, 7, 64, 5000])
def test_rows_are_labelled_by_the_next_fetch_whatever_the_batches(tmp_path, batch_size):
    events = stream(seed=batch_size, fetches=700, pages=40)
    table = FeatureTable(tmp_path / "features.parquet", HISTORY, row_group=100)
    for start in range(0, len(events), batch_size):
        table.add_batch(columns(events[start : start + batch_size]))
    table.close()
    want = expected_rows(events)
    assert read_rows(tmp_path / "features.parquet") == want
    assert table.rows == len(events) == len(want)
    assert table.labelled == sum(1 for row in want if row["label_new_internal"] is not None)


def test_an_empty_run_writes_an_empty_table(tmp_path):
    table = FeatureTable(tmp_path / "features.parquet", HISTORY)
    table.add_batch(columns([]))
    table.close()
    assert pq.read_table(tmp_path / "features.parquet").num_rows == 0
    assert table.rows == table.labelled == 0


def test_a_pending_row_costs_columns_not_objects(tmp_path):
    """What keeps the writer small at a million pages: a page's waiting row is a slot of a
    few arrays and its URL's bytes, not Python objects (the URL's str, the page id's int and a
    dict entry alone would be about 200 bytes a page)."""
    import tracemalloc

    pages, size = 20_000, 1000

    def batch(start: int) -> ScoredColumns:  # built afresh: the table owns what it keeps
        events = stream(seed=start, fetches=size, pages=size)
        for k, event in enumerate(events, start):  # every page once: every row waits
            event["page_id"] = 10**12 + k
            event["url"] = f"https://www.example.org/section/article-{k:07d}.html"
        return columns(events)

    table = FeatureTable(tmp_path / "features.parquet", HISTORY)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for start in range(0, pages, size):
        table.add_batch(batch(start))
    per_page = (tracemalloc.get_traced_memory()[0] - before) / pages
    tracemalloc.stop()
    table.close()
    row_bytes = 4 * WIDTH + 4 * len(CANDIDATES) + 8 * 4 + 8 * 3 + 2 + 1  # the row's arrays
    url_bytes = len("https://www.example.org/section/article-0000000.html")
    # the row and its URL, the slots' growth by a quarter, and 30 bytes of bookkeeping
    assert per_page < 1.25 * (row_bytes + 8 + 1 + 12 + url_bytes) + 30, per_page


def test_a_row_keeps_the_url_of_its_own_fetch_when_a_page_url_changes(tmp_path):
    """The writer keeps a page's URL once and a changed one anew: each row is written with
    the URL its fetch came with, whatever the batches."""
    events = stream(seed=5, fetches=300, pages=12)
    for k, event in enumerate(events):
        if k % 3 == 0:  # the same page id under another spelling of its URL
            event["url"] = event["url"] + f"?v={k}"
    for batch_size in (1, 11, 300):
        path = tmp_path / f"features-{batch_size}.parquet"
        table = FeatureTable(path, HISTORY, row_group=50)
        for start in range(0, len(events), batch_size):
            table.add_batch(columns(events[start : start + batch_size]))
        table.close()
        assert read_rows(path) == expected_rows(events)


def test_scored_columns_cross_to_the_writer_process_unchanged() -> None:
    """A batch pickled for the writer comes back field for field, its intervals `Interval`s
    again (the writer reads them by name)."""
    batch = columns(stream(seed=3, fetches=40, pages=8))
    batch.row_models = [{"batch": "v1"}] * len(batch)
    back = pickle.loads(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
    assert back.intervals == batch.intervals
    assert any(i is not None for i in back.intervals) and any(i is None for i in back.intervals)
    assert all(i is None or type(i) is Interval for i in back.intervals)
    for f in fields(ScoredColumns):
        if f.name not in ("matrix", "candidates"):
            assert getattr(back, f.name) == getattr(batch, f.name), f.name
    np.testing.assert_array_equal(back.matrix, batch.matrix)
    assert back.candidates is not None and batch.candidates is not None
    for name, values in batch.candidates.items():
        np.testing.assert_array_equal(back.candidates[name], values)
