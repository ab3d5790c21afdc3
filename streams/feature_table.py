"""features.parquet: every scored fetch's feature row, labelled by its page's next fetch.

A page's row waits until the page is fetched again (its label: the new links that fetch
showed); the rows of pages not fetched again are written at the end, unlabelled. So the table
holds one pending row for every page seen, and at a million pages what a pending row costs
decides the writer's memory. Pending rows are kept as columns, one slot of each per page (a
float32 feature matrix, numeric arrays, the URL), not as a tuple of Python objects per page:
a few hundred bytes a page instead of a few thousand. A batch moves rows with array gathers.

Nulls: a value the pipeline did not estimate (None) is NaN in the float columns and null in
the file; an unknown crawl round is null through a mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from online.candidates import CANDIDATES
from online.features import feature_names
from online.id_rows import IdRows
from online.scored import ScoredColumns

#: the float64 columns of a row's values, in `ScoredColumns.values` order
_VALUES = ("score", "expected_new_internal", "expected_new_external", "p_new")
#: the same columns in the file's order
_ORDER = ("score", "p_new", "expected_new_internal", "expected_new_external")
_TIMESTAMP = pa.timestamp("ms", tz="UTC")
#: the array fields of `_Rows`, in its order (all but the URLs)
_ARRAYS = (
    "page_id",
    "crawl",
    "crawl_known",
    "millis",
    "status",
    "values",
    "candidates",
    "features",
)


def candidate_column(name: str) -> str:
    """The features.parquet column of a candidate's rate per day (learned scorers only)."""
    return f"candidate_{name.replace('-', '_')}"


@dataclass
class _Rows:
    """Rows as columns: what a batch contributes, a slot gather of the pending rows, or a
    finished chunk with its labels."""

    urls: list[str]
    page_id: np.ndarray  # int64
    crawl: np.ndarray  # int64
    crawl_known: np.ndarray  # bool
    millis: np.ndarray  # int64
    status: np.ndarray  # int16
    values: np.ndarray  # float64 (n, 4): _VALUES, NaN where None
    candidates: np.ndarray  # float32 (n, K), NaN where not recorded
    features: np.ndarray  # float32 (n, F)

    @classmethod
    def of_batch(cls, batch: ScoredColumns) -> _Rows:
        n = len(batch)
        known = np.fromiter((c is not None for c in batch.crawls), bool, n)
        if batch.candidates:
            candidates = np.column_stack(
                [batch.candidates.get(name, np.full(n, np.nan)) for name in CANDIDATES]
            ).astype(np.float32)
        else:
            candidates = np.full((n, len(CANDIDATES)), np.nan, dtype=np.float32)
        return cls(
            urls=list(batch.urls),
            page_id=np.fromiter(batch.page_ids, np.int64, n),
            crawl=np.fromiter((c if c is not None else 0 for c in batch.crawls), np.int64, n),
            crawl_known=known,
            millis=np.fromiter((round(t * 1000) for t in batch.timestamps), np.int64, n),
            status=np.fromiter(batch.statuses, np.int16, n),
            values=np.array([v[:4] for v in batch.values], dtype=np.float64).reshape(n, 4),
            candidates=candidates,
            features=batch.matrix.astype(np.float32),
        )

    def take(self, index: np.ndarray) -> _Rows:
        return _Rows(
            [self.urls[i] for i in index.tolist()],
            self.page_id[index],
            self.crawl[index],
            self.crawl_known[index],
            self.millis[index],
            self.status[index],
            self.values[index],
            self.candidates[index],
            self.features[index],
        )


def _interleave(first: _Rows, second: _Rows, from_second: np.ndarray) -> _Rows:
    """Rows in one order: where ``from_second`` is set the next row of ``second``, else of
    ``first``."""
    n = len(from_second)

    def merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty((n, *a.shape[1:]), dtype=a.dtype)
        out[~from_second] = a
        out[from_second] = b
        return out

    urls: list[str] = []
    left, right = iter(first.urls), iter(second.urls)
    for flag in from_second.tolist():
        urls.append(next(right) if flag else next(left))
    return _Rows(
        urls,
        *(merge(getattr(first, name), getattr(second, name)) for name in _ARRAYS),
    )


@dataclass
class _Labels:
    """What a row's next fetch showed (null where that fetch closed no interval)."""

    new_internal: np.ndarray  # int64
    new_external: np.ndarray  # int64
    days: np.ndarray  # float32, NaN where null
    known: np.ndarray  # bool: an interval closed
    millis: np.ndarray  # int64: the labelling fetch's time
    millis_known: np.ndarray  # bool


#: The columns written with dictionary pages: the URLs only. On the float feature columns,
#: whose values rarely repeat, dictionaries cost 1.7x the write time of plain pages and give
#: a larger file (``bench/feature_table_write.py``).
DICTIONARY_COLUMNS = ["url"]


class FeatureTable:
    """Feature rows waiting for their labels, then written to Parquet in row groups, in the
    order their labels arrive; the rest at `close`, in the order their pages were last
    fetched (see the module's docstring)."""

    def __init__(self, path: Path, history: int, row_group: int = 50_000) -> None:
        self.names = feature_names(history)
        self.path = path
        self.row_group = row_group
        self.rows = 0
        self.labelled = 0
        self._slots_of = IdRows()  # page id -> slot, numbered in the order pages first came
        self._urls = _UrlColumn()  # slot -> the pending row's URL
        self._waiting = np.zeros(0, bool)  # slot -> whether a row is pending there
        self._seq = 0
        self._capacity = 0
        self._pending = _empty_rows(0, len(self.names))
        self._last = np.empty(0, dtype=np.int64)  # slot -> sequence number of its latest fetch
        self._done: list[tuple[_Rows, _Labels]] = []
        self._done_rows = 0
        self.schema = pa.schema(
            [
                ("url", pa.string()),
                ("page_id", pa.int64()),
                ("crawl", pa.int64()),  # any 64-bit crawl round the contract accepts
                ("fetched_at", _TIMESTAMP),
                ("status", pa.int16()),
                ("score", pa.float64()),
                ("p_new", pa.float64()),
                ("expected_new_internal", pa.float64()),
                ("expected_new_external", pa.float64()),
                *[(n, pa.float32()) for n in self.names],
                *[(candidate_column(n), pa.float32()) for n in CANDIDATES],
                ("label_new_internal", pa.int32()),
                ("label_new_external", pa.int32()),
                ("label_interval_days", pa.float32()),
                ("label_fetched_at", _TIMESTAMP),
            ]
        )
        self.writer = pq.ParquetWriter(
            path, self.schema, compression="zstd", use_dictionary=DICTIONARY_COLUMNS
        )

    def add_batch(self, batch: ScoredColumns) -> None:
        """Scored fetches in stream order: each labels its page's pending row, then waits."""
        n = len(batch)
        if not n:
            return
        rows = _Rows.of_batch(batch)
        slots = self._slots(batch.page_ids)
        # Per fetch, the fetch whose row it labels: earlier in this batch (its position), or
        # the pending row from before the batch (-1), or none (-2).
        previous = np.empty(n, dtype=np.int64)
        latest: dict[int, int] = {}
        waiting = self._waiting
        for at, slot in enumerate(slots):
            before = latest.get(slot)
            previous[at] = before if before is not None else (-1 if waiting[slot] else -2)
            latest[slot] = at
        labelling = np.flatnonzero(previous > -2)
        if len(labelling):
            from_batch = previous[labelling] >= 0
            slot_array = np.asarray(slots, dtype=np.int64)
            older = self._gather(slot_array[labelling[~from_batch]])
            newer = rows.take(previous[labelling[from_batch]])
            self._finish(_interleave(older, newer, from_batch), _labels(batch, labelling))
        touched = np.fromiter(latest, np.int64, len(latest))
        positions = np.fromiter(latest.values(), np.int64, len(latest))
        self._scatter(touched, rows.take(positions))
        self._last[touched] = self._seq + positions
        self._seq += n

    def _slots(self, page_ids: list[int]) -> list[int]:
        seen = len(self._slots_of)
        slots = self._slots_of.number(np.fromiter(page_ids, np.int64, len(page_ids)), seen)
        if len(self._slots_of) > self._capacity:  # by a quarter: the slack is memory at the peak
            self._grow(max(self._capacity + self._capacity // 4, len(self._slots_of), 1024))
        return slots.tolist()

    def _grow(self, capacity: int) -> None:
        grown = _empty_rows(capacity, len(self.names))
        for name in _ARRAYS:
            getattr(grown, name)[: self._capacity] = getattr(self._pending, name)
        last = np.full(capacity, -1, dtype=np.int64)
        last[: self._capacity] = self._last
        waiting = np.zeros(capacity, bool)
        waiting[: self._capacity] = self._waiting
        self._urls.grow(capacity)
        self._pending, self._last, self._waiting = grown, last, waiting
        self._capacity = capacity

    def _gather(self, slots: np.ndarray) -> _Rows:
        pending = self._pending
        return _Rows(
            self._urls.get(slots),
            *(getattr(pending, name)[slots] for name in _ARRAYS),
        )

    def _scatter(self, slots: np.ndarray, rows: _Rows) -> None:
        self._urls.put(slots, rows.urls)
        self._waiting[slots] = True
        for name in _ARRAYS:
            getattr(self._pending, name)[slots] = getattr(rows, name)

    def _finish(self, rows: _Rows, labels: _Labels) -> None:
        self._done.append((rows, labels))
        self._done_rows += len(rows.urls)
        self.rows += len(rows.urls)
        self.labelled += int(labels.known.sum())
        if self._done_rows >= self.row_group:
            self._flush()

    def _flush(self) -> None:
        if not self._done:
            return
        self.writer.write_table(_table(self._done, self.schema))
        self._done.clear()
        self._done_rows = 0

    def close(self) -> None:
        waiting = np.flatnonzero(self._waiting)
        waiting = waiting[np.argsort(self._last[waiting], kind="stable")]
        for lo in range(0, len(waiting), self.row_group):
            part = waiting[lo : lo + self.row_group]
            self._finish(self._gather(part), _no_labels(len(part)))
        self._waiting[:] = False
        self._flush()
        self.writer.close()


class _UrlColumn:
    """Slot -> URL, as one buffer of UTF-8 bytes with an offset and a length a slot: a str
    object a page would take about twice the memory. A slot's URL is written once (a page's
    URL comes again with every fetch); a different one is appended and the old bytes left."""

    def __init__(self) -> None:
        self._bytes = bytearray()
        self._at = np.zeros(0, np.int64)
        self._length = np.full(0, -1, np.int32)  # -1: none yet

    def grow(self, capacity: int) -> None:
        at = np.zeros(capacity, np.int64)
        at[: len(self._at)] = self._at
        length = np.full(capacity, -1, np.int32)
        length[: len(self._length)] = self._length
        self._at, self._length = at, length

    def put(self, slots: np.ndarray, urls: list[str]) -> None:
        buffer = self._bytes
        for slot, url in zip(slots.tolist(), urls, strict=True):
            encoded = url.encode()
            at, length = int(self._at[slot]), int(self._length[slot])
            if length == len(encoded) and buffer.startswith(encoded, at):
                continue
            self._at[slot], self._length[slot] = len(buffer), len(encoded)
            buffer += encoded

    def get(self, slots: np.ndarray) -> list[str]:
        buffer = self._bytes
        starts, lengths = self._at[slots].tolist(), self._length[slots].tolist()
        return [buffer[a : a + n].decode() for a, n in zip(starts, lengths, strict=True)]


def _empty_rows(n: int, features: int) -> _Rows:
    return _Rows(
        [],
        np.zeros(n, np.int64),
        np.zeros(n, np.int64),
        np.zeros(n, bool),
        np.zeros(n, np.int64),
        np.zeros(n, np.int16),
        np.zeros((n, 4), np.float64),
        np.zeros((n, len(CANDIDATES)), np.float32),
        np.zeros((n, features), np.float32),
    )


def _labels(batch: ScoredColumns, positions: np.ndarray) -> _Labels:
    """The labels the fetches at ``positions`` give their pages' previous rows."""
    intervals = [batch.intervals[at] for at in positions.tolist()]
    n = len(intervals)
    known = np.fromiter((i is not None for i in intervals), bool, n)
    stamps = batch.timestamps
    return _Labels(
        new_internal=np.fromiter((i.new_internal if i else 0 for i in intervals), np.int64, n),
        new_external=np.fromiter((i.new_external if i else 0 for i in intervals), np.int64, n),
        days=np.fromiter((i.days if i else np.nan for i in intervals), np.float64, n).astype(
            np.float32
        ),
        known=known,
        millis=np.fromiter((round(stamps[at] * 1000) for at in positions.tolist()), np.int64, n),
        millis_known=np.ones(n, bool),
    )


def _no_labels(n: int) -> _Labels:
    zeros = np.zeros(n, np.int64)
    missing = np.zeros(n, bool)
    return _Labels(zeros, zeros, np.full(n, np.nan, np.float32), missing, zeros, missing)


def _table(done: list[tuple[_Rows, _Labels]], schema: pa.Schema) -> pa.Table:
    """Finished rows as one Arrow table of ``schema``."""

    def column(source: str, name: str) -> np.ndarray:
        return np.concatenate([getattr(part[0 if source == "rows" else 1], name) for part in done])

    urls = [url for rows, _ in done for url in rows.urls]
    values = column("rows", "values")
    candidates = column("rows", "candidates")
    # Column-major first: pyarrow copies a strided column element by element, 20x slower.
    features = np.ascontiguousarray(column("rows", "features").T)
    labelled = column("labels", "known")
    stamped = column("labels", "millis_known")
    arrays = [
        pa.array(urls, pa.string()),
        pa.array(column("rows", "page_id"), pa.int64()),
        pa.array(column("rows", "crawl"), pa.int64(), mask=~column("rows", "crawl_known")),
        pa.array(column("rows", "millis"), pa.int64()).cast(_TIMESTAMP),
        pa.array(column("rows", "status"), pa.int16()),
        *[pa.array(values[:, _VALUES.index(name)], from_pandas=True) for name in _ORDER],
        *[pa.array(feature, pa.float32()) for feature in features],
        *[pa.array(np.ascontiguousarray(c), from_pandas=True) for c in candidates.T],
        pa.array(column("labels", "new_internal"), pa.int32(), mask=~labelled),
        pa.array(column("labels", "new_external"), pa.int32(), mask=~labelled),
        pa.array(column("labels", "days"), from_pandas=True),
        pa.array(column("labels", "millis"), pa.int64(), mask=~stamped).cast(_TIMESTAMP),
    ]
    return pa.Table.from_arrays(arrays, schema=schema)
