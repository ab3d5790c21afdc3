"""What the learned scorer has learned, as data that a page store keeps between batches.

`EnsembleState` is everything `online.learned.EnsembleScorer` carries from one batch to the
next: the candidates' AdaHedge weights, the site's rates and rhythm (`online.site`), the
credibility of each prior, the P(>= 1) calibration, the River learner, the labels waiting for
the next epoch, and which ranking option (`online.blending`) is in use since when. The pipeline
writes it with each batch's page records (the live worker to Redis) and restores it at start,
or after a failed batch.

It is stored as data (`online.state_codec`), never as a pickle: a blob read back from a store
that others can write cannot run code. Kept apart from the scorer so that what is stored, and
how it is read back, is in one short module.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from isal import isal_zlib

from online import state_codec
from online.blending import ANCHOR
from online.calibration import AnyLinkCalibration
from online.candidates import PRIORS
from online.credibility import Credibility
from online.hedge import AdaHedge
from online.learners import LinkLearner
from online.site import SiteStats

#: A stored block: this, then its data blob (`online.state_codec`) deflated (zlib, level 1:
#: a block's rows take about a third of the space, at over 100 MB/s).
ZBLOCK = b"LOOKAROUND-ZBLOCK\n"
#: The most a stored block may inflate to (a larger one is refused: not ours, or a bomb).
MAX_BLOCK_BYTES = 256 << 20


def pack_block(blob: bytes) -> bytes:
    """A data blob as a block is stored (`ZBLOCK`: zlib's format, deflated by ISA-L)."""
    return ZBLOCK + isal_zlib.compress(blob, 1)


def unpack_block(stored: bytes) -> bytes:
    """`pack_block`'s inverse; `StateRefused` for a damaged block or one that inflates past
    `MAX_BLOCK_BYTES`.

    >>> unpack_block(pack_block(b"data"))
    b'data'
    """
    if not stored.startswith(ZBLOCK):
        raise state_codec.StateRefused(f"not a stored block (starts {stored[:8]!r})")
    inflate = zlib.decompressobj()
    try:
        blob = inflate.decompress(memoryview(stored)[len(ZBLOCK) :], MAX_BLOCK_BYTES)
    except zlib.error as exc:
        raise state_codec.StateRefused(f"damaged block: {exc}") from None
    if inflate.unconsumed_tail or not inflate.eof:
        raise state_codec.StateRefused(f"damaged block, or over {MAX_BLOCK_BYTES} bytes inflated")
    return blob


def shuffle_bytes(values: np.ndarray) -> bytes:
    """A 2-d array's bytes grouped by byte position, then column (the first byte of every
    value of column 0, of column 1, ..., then the second bytes): lossless, and it lets deflate
    see a column's exponents and sign bytes together, about a quarter fewer bytes for feature
    rows than deflating them as they lie (`unshuffle_bytes` reverses it).

    >>> a = np.arange(6, dtype="<f4").reshape(3, 2)
    >>> bool((unshuffle_bytes(shuffle_bytes(a), a.shape, a.dtype) == a).all())
    True
    """
    values = np.ascontiguousarray(values)
    by_byte = values.view(np.uint8).reshape(len(values), -1, values.dtype.itemsize)
    return np.ascontiguousarray(by_byte.transpose(2, 1, 0)).tobytes()


def unshuffle_bytes(data: bytes, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """`shuffle_bytes`' inverse: the (rows, columns) array of ``dtype`` (a new, writable one)."""
    dtype = np.dtype(dtype)
    rows, columns = shape
    by_byte = np.frombuffer(data, np.uint8).reshape(dtype.itemsize, columns, rows)
    return np.ascontiguousarray(by_byte.transpose(2, 1, 0)).view(dtype).reshape(rows, columns)


class _Block:
    """One batch's waiting rows and labels, read-only, with how many of them were taken from
    its front (``skip``); ``blob`` caches its encoding (`PendingLabels.block_blob`).

    The rows are kept byte-shuffled (`shuffle_bytes`) and deflated (level 1, by ISA-L: about a
    fifth of zlib's time for the same size) and inflated when read: a site's whole round
    waits for its epoch, and at a million pages the float32 rows would be over 300 MB; they
    are read once, when the epoch takes them. The labels stay as they are (`first` and
    `count_before` read them every batch)."""

    __slots__ = ("_deflated", "_shape", "blob", "labels", "seq", "skip")

    def __init__(self, seq: int, rows: np.ndarray, labels: np.ndarray, skip: int = 0) -> None:
        self.seq, self.labels, self.skip = seq, labels, skip
        rows32 = np.ascontiguousarray(rows, np.float32)
        self._shape = rows32.shape
        self._deflated = isal_zlib.compress(shuffle_bytes(rows32), 1)
        self.blob: bytes | None = None

    @property
    def rows(self) -> np.ndarray:
        """The rows (float32, read-only), inflated."""
        rows = unshuffle_bytes(isal_zlib.decompress(self._deflated), self._shape, np.float32)
        rows.flags.writeable = False
        return rows

    @property
    def rows_shape(self) -> tuple[int, ...]:
        return self._shape

    def shuffled_rows(self) -> bytes:
        """The rows as `shuffle_bytes` gives them (inflated, not yet unshuffled)."""
        return isal_zlib.decompress(self._deflated)

    def copy(self) -> _Block:
        block = _Block.__new__(_Block)
        block.seq, block.labels, block.skip = self.seq, self.labels, self.skip
        block._shape, block._deflated, block.blob = self._shape, self._deflated, self.blob
        return block


class TakenRows:
    """Rows an epoch took, in order, still deflated a block at a time: read as runs of rows
    (`runs`) or the last few (`tail`), so that an epoch of a million labels never holds all
    their rows at once.

    >>> pending = PendingLabels()
    >>> for at in range(3):
    ...     pending.add(np.full((2, 1), at), np.zeros((2, 5)))
    >>> taken, _ = pending.take(5)
    >>> [run[:, 0].tolist() for run in taken.runs(2)], taken.tail(3)[:, 0].tolist()
    ([[0.0, 0.0], [1.0, 1.0], [2.0]], [1.0, 1.0, 2.0])
    """

    __slots__ = ("_count", "_parts")

    def __init__(self, parts: list[tuple[_Block, int, int]]) -> None:
        self._parts = parts  # (block, first row, end) in order
        self._count = sum(end - first for _, first, end in parts)

    def __len__(self) -> int:
        return self._count

    def runs(self, size: int) -> Iterator[np.ndarray]:
        """The rows (float32) as consecutive runs of ``size`` (the last may be shorter)."""
        if size < 1:
            raise ValueError("size must be >= 1")
        gathered: list[np.ndarray] = []
        have = 0
        for block, first, end in self._parts:
            rows = block.rows[first:end]
            while len(rows):
                part, rows = rows[: size - have], rows[size - have :]
                gathered.append(part)
                have += len(part)
                if have == size:
                    yield _joined(gathered)
                    gathered, have = [], 0
        if gathered:
            yield _joined(gathered)

    def tail(self, n: int) -> np.ndarray:
        """The last ``n`` rows (all, if fewer), float32."""
        gathered: list[np.ndarray] = []
        for block, first, end in reversed(self._parts):
            if n <= 0:
                break
            start = max(first, end - n)
            gathered.append(block.rows[start:end])
            n -= end - start
        if not gathered:
            return np.empty((0, 0), np.float32)
        return _joined(gathered[::-1])


def _block_arrays(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """A stored block's rows (float32) and labels (float64, n x 5): byte-shuffled (this
    version) or as arrays (blocks written before)."""
    if "rows" in data:
        rows = np.asarray(data["rows"], np.float32)
        return rows, np.asarray(data["labels"], np.float64).reshape(-1, 5)
    count, columns = (int(n) for n in data["shape"])
    rows = unshuffle_bytes(data["shuffled_rows"].tobytes(), (count, columns), "<f4")
    labels = unshuffle_bytes(data["shuffled_labels"].tobytes(), (count, 5), "<f8")
    return rows.astype(np.float32, copy=False), labels.astype(np.float64, copy=False)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


class PendingLabels:
    """Labelled feature rows waiting for the next epoch, in the order they arrived: rows
    (float32, one per labelled fetch: its page's row at the previous fetch) and their labels
    (float64: new internal, new external, interval days, content changed 0 / 1, the time the
    label was observed).

    Kept as one read-only block per batch, numbered in the order they came (``seq``), not an
    array and a tuple per row: a site's whole round can wait here, so at a million pages this
    is hundreds of megabytes less. `take` only moves a block's start or drops it, so a copy
    (`copy.deepcopy` included: what a checkpoint takes before every batch) shares the arrays
    and costs a list per batch, not per row; and a store keeps each block once, as its own
    record (`block_blob`), instead of every waiting row with every batch.

    >>> pending = PendingLabels()
    >>> pending.add(np.ones((2, 3)), np.array([[1, 0, 7, 1, 10.0], [0, 0, 7, 0, 20.0]]))
    >>> len(pending), pending.count_before(15.0), float(pending.first()[4])
    (2, 1, 10.0)
    >>> rows, labels = pending.take(1)
    >>> rows.tail(1).shape, float(labels[0, 0]), len(pending), float(pending.first()[4])
    ((1, 3), 1.0, 1, 20.0)
    >>> pending.refs()  # (block, rows taken from its front)
    [(0, 1)]
    """

    #: Kind of a stored block (`online.state_codec`).
    BLOCK_KIND = "pending-labels-block"

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self._count = 0
        self.next_seq = 0

    def __len__(self) -> int:
        return self._count

    def add(self, rows: np.ndarray, labels: np.ndarray) -> None:
        """Append rows (n, F) and their labels (n, 5); nothing for n = 0."""
        if not len(labels):
            return
        rows = np.asarray(rows, dtype=np.float32)  # the block keeps them deflated, a copy
        labels = np.array(labels, dtype=np.float64).reshape(-1, 5)
        if len(rows) != len(labels):
            raise ValueError(f"{len(rows)} pending rows for {len(labels)} labels")
        labels.flags.writeable = False
        self._blocks.append(_Block(self.next_seq, rows, labels))
        self.next_seq += 1
        self._count += len(labels)

    def first(self) -> np.ndarray | None:
        """The oldest waiting label, or None."""
        if not self._blocks:
            return None
        block = self._blocks[0]
        return block.labels[block.skip]

    def count_before(self, now: float) -> int:
        """How many waiting labels were observed before ``now``."""
        return sum(int(np.count_nonzero(b.labels[b.skip :, 4] < now)) for b in self._blocks)

    def take(self, k: int) -> tuple[TakenRows, np.ndarray]:
        """The oldest ``k`` rows (still deflated: `TakenRows`) and labels, no longer waiting."""
        parts: list[tuple[_Block, int, int]] = []
        labels: list[np.ndarray] = []
        while k > 0 and self._blocks:
            block = self._blocks[0]
            end = min(block.skip + k, len(block.labels))
            parts.append((block, block.skip, end))
            labels.append(block.labels[block.skip : end])
            taken = end - block.skip
            if end == len(block.labels):
                del self._blocks[0]
            else:  # the rest stays: the same read-only block, from a later row
                self._blocks[0] = block = block.copy()
                block.skip = end
            self._count -= taken
            k -= taken
        if not labels:
            return TakenRows([]), np.empty((0, 5), np.float64)
        return TakenRows(parts), np.concatenate(labels)

    def all(self) -> tuple[np.ndarray | None, np.ndarray]:
        """Every waiting row (None if none) and label, without taking them."""
        if not self._blocks:
            return None, np.empty((0, 5), np.float64)
        return (
            np.concatenate([b.rows[b.skip :] for b in self._blocks]),
            np.concatenate([b.labels[b.skip :] for b in self._blocks]),
        )

    # -- stored a block at a time --------------------------------------------------------------

    def refs(self) -> list[tuple[int, int]]:
        """The waiting blocks, oldest first: (block number, rows taken from its front)."""
        return [(b.seq, b.skip) for b in self._blocks]

    def block_blobs(self) -> dict[int, bytes]:
        """Every waiting block, whole, as data (`online.state_codec`), by block number; each
        encoded once and kept, since a block never changes."""
        out = {}
        for block in self._blocks:
            if block.blob is None:
                data = {
                    "shape": list(block.rows_shape),
                    "shuffled_rows": np.frombuffer(block.shuffled_rows(), np.uint8),
                    "shuffled_labels": np.frombuffer(shuffle_bytes(block.labels), np.uint8),
                }
                block.blob = pack_block(state_codec.dumps(self.BLOCK_KIND, data))
            out[block.seq] = block.blob
        return out

    @classmethod
    def from_blocks(
        cls, refs: list[tuple[int, int]], blobs: Mapping[int, bytes], next_seq: int
    ) -> PendingLabels:
        """The labels `refs` and `block_blobs` describe; `StateRefused` if a block is
        missing or not ours."""
        pending = cls()
        for seq, skip in refs:
            blob = blobs.get(seq)
            if blob is None:
                raise state_codec.StateRefused(f"waiting-labels block {seq} is missing")
            data = state_codec.loads(unpack_block(blob), cls.BLOCK_KIND)
            try:
                rows, labels = _block_arrays(data)
            except (KeyError, TypeError, ValueError):
                rows, labels = np.empty((0, 0), np.float32), np.empty((0, 5))
            if len(rows) != len(labels) or not 0 <= skip < len(labels):
                raise state_codec.StateRefused(f"waiting-labels block {seq} is damaged")
            labels.flags.writeable = False
            block = _Block(seq, rows, labels, skip)
            block.blob = bytes(blob)
            pending._blocks.append(block)
            pending._count += len(labels) - skip
        pending.next_seq = next_seq
        return pending

    def __deepcopy__(self, memo: dict) -> PendingLabels:
        new = PendingLabels()
        new._blocks = [b.copy() for b in self._blocks]
        new._count, new.next_seq = self._count, self.next_seq
        return new


@dataclass(frozen=True)
class StoredState:
    """An `EnsembleState` as a store keeps it: the state without its waiting labels
    (``head``) and each block of those (``blocks``, by number, as `PendingLabels.block_blobs`
    gives them). A store writes a block once, when it first appears, and drops it when the
    head no longer names it, rather than every waiting row with every batch."""

    head: bytes
    blocks: dict[int, bytes]


@dataclass
class EnsembleState:
    """What the scorer has learned: plain data but the River learner and the refresher."""

    hedge: AdaHedge
    site: SiteStats = field(default_factory=SiteStats)
    calibration: AnyLinkCalibration = field(default_factory=AnyLinkCalibration)
    credibility: list[Credibility] = field(
        default_factory=lambda: [Credibility(len(PRIORS)) for _ in range(2)]
    )
    learner: LinkLearner | None = None
    feature_names: list[str] | None = None
    last_epoch: float | None = None
    #: the time of the first event the scorer saw (the first epoch is measured from it)
    first_seen: float | None = None
    epochs: int = 0
    pending: PendingLabels = field(default_factory=PendingLabels)
    #: per ranking option, its measured ranking quality on each epoch's labels
    measured: dict[str, list[float]] = field(default_factory=dict)
    #: per tie-breaker, the estimate a silent page needs to be lifted (learned at epochs)
    lift_thresholds: dict[str, float] = field(default_factory=dict)
    #: since the last epoch: per tie-breaker, a histogram of its estimates over the silent
    #: pages scored; and the pages scored, silent and all
    lift_histograms: dict[str, np.ndarray] = field(default_factory=dict)
    scored: list[int] = field(default_factory=lambda: [0, 0])
    #: the site's typical interval (days) the scorer works with: set at the first label (the
    #: time to the first refetch), then the measured one, taken up only when it is more than a
    #: quarter away from the one in use (a drift must not re-rank pages scored either side of
    #: an epoch); None before any label: `online.learned.DEFAULT_INTERVAL_DAYS`
    interval_days: float | None = None
    #: the ranking option in use, and from which epoch each option was chosen
    choice: str = f"{ANCHOR}+lbla"
    choices: list[tuple[int, str]] = field(default_factory=list)

    #: Kind of the stored blob (`online.state_codec`).
    STATE_KIND = "ensemble-state"

    def to_bytes(self) -> bytes:
        """This state as data (`online.state_codec`), its waiting labels included: no pickle,
        so a blob read back from a store that others can write cannot run code."""
        rows, labels = self.pending.all()
        data = self._data()
        data["pending_rows"] = rows
        # (n, 5) float64: exact for the counts, days and times, and 0 / 1 for the flag
        data["pending_labels"] = labels
        return state_codec.dumps(self.STATE_KIND, data)

    def to_parts(self) -> StoredState:
        """This state as a store keeps it (`StoredState`): the head names the waiting
        labels' blocks, each block encoded once for all the batches it waits."""
        data = self._data()
        data["pending_blocks"] = [list(ref) for ref in self.pending.refs()]
        data["next_block"] = self.pending.next_seq
        return StoredState(state_codec.dumps(self.STATE_KIND, data), self.pending.block_blobs())

    @classmethod
    def from_bytes(cls, blob: bytes) -> EnsembleState:
        """The state `to_bytes` wrote; `StateRefused` for anything else (a pickle included)."""
        return cls.from_parts(blob, {})

    @classmethod
    def block_refs(cls, head: bytes) -> list[int]:
        """The numbers of the blocks a head (`to_parts`) names, none for a whole blob
        (`to_bytes`); `StateRefused` for a blob that is not a state."""
        d = state_codec.loads(head, cls.STATE_KIND)
        try:
            return [int(seq) for seq, _ in d.get("pending_blocks", [])]
        except (TypeError, ValueError, AttributeError) as exc:
            raise state_codec.StateRefused(f"bad {cls.STATE_KIND} blob: {exc!r}") from None

    @classmethod
    def from_parts(cls, head: bytes, blocks: Mapping[int, bytes]) -> EnsembleState:
        """The state of a head and its blocks (`to_parts`), or of a whole blob
        (`to_bytes`); `StateRefused` for anything else, or when a block is missing."""
        d = state_codec.loads(head, cls.STATE_KIND)
        try:
            if "pending_blocks" in d:
                refs = [(int(seq), int(skip)) for seq, skip in d["pending_blocks"]]
                pending = PendingLabels.from_blocks(refs, blocks, int(d["next_block"]))
            else:
                pending = PendingLabels()
                labels = np.asarray(d["pending_labels"], np.float64).reshape(-1, 5)
                if len(labels):
                    pending.add(np.asarray(d["pending_rows"], np.float32), labels)
            return cls._from_data(d, pending)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, state_codec.StateRefused):
                raise
            raise state_codec.StateRefused(f"bad {cls.STATE_KIND} blob: {exc!r}") from None

    def _data(self) -> dict[str, Any]:
        """Everything but the waiting labels, as data."""
        return {
            "hedge": self.hedge.state(),
            "site": self.site.state(),
            "calibration": self.calibration.state(),
            "credibility": [c.state() for c in self.credibility],
            "learner": None if self.learner is None else self.learner.to_data(),
            "feature_names": self.feature_names,
            "last_epoch": self.last_epoch,
            "first_seen": self.first_seen,
            "epochs": self.epochs,
            "measured": self.measured,
            "lift_thresholds": self.lift_thresholds,
            "lift_histograms": self.lift_histograms,
            "scored": self.scored,
            "interval_days": self.interval_days,
            "choice": self.choice,
            "choices": [list(c) for c in self.choices],
        }

    @classmethod
    def _from_data(cls, d: dict[str, Any], pending: PendingLabels) -> EnsembleState:
        return cls(
            hedge=AdaHedge.from_state(d["hedge"]),
            site=SiteStats.from_state(d["site"]),
            calibration=AnyLinkCalibration.from_state(d["calibration"]),
            credibility=[Credibility.from_state(c) for c in d["credibility"]],
            learner=None if d["learner"] is None else LinkLearner.from_data(d["learner"]),
            feature_names=None if d["feature_names"] is None else list(d["feature_names"]),
            last_epoch=_opt_float(d["last_epoch"]),
            first_seen=_opt_float(d["first_seen"]),
            epochs=int(d["epochs"]),
            pending=pending,
            measured={k: [float(v) for v in vs] for k, vs in d["measured"].items()},
            lift_thresholds={k: float(v) for k, v in d["lift_thresholds"].items()},
            lift_histograms={k: np.asarray(v, np.int64) for k, v in d["lift_histograms"].items()},
            scored=[int(v) for v in d["scored"]],
            interval_days=_opt_float(d["interval_days"]),
            choice=str(d["choice"]),
            choices=[(int(e), str(c)) for e, c in d["choices"]],
        )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


__all__ = ["EnsembleState", "PendingLabels", "StoredState"]
