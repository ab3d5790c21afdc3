"""Events files in, batches of validated fetches and rejects out; optionally in a second process.

Parsing and validating an event (JSON, URLs, fingerprints, vector) is pure per-event work
and costs about as much as everything else the replay does, so on a multi-core machine it runs
in a reader process while the main process runs the pipeline. The order of events is kept
exactly: one reader, one pipe.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import BinaryIO

from isal import igzip

from batch.helper_processes import run_as_helper, widen_pipe
from online.errors import InputError
from online.events import (
    DEFAULT_EMBEDDING_DIM,
    DEFAULT_LIMITS,
    DEFAULT_MAX_OUTLINKS,
    EventError,
    EventLimits,
)
from online.fetch import Fetch, fetch_columns, fetches_from_columns, parse_fetch


@dataclass(frozen=True, slots=True)
class Reject:
    """One event that failed validation, kept with its line number and raw text."""

    line: int
    field: str
    reason: str
    raw: str

    def as_dict(self) -> dict:
        return {"line": self.line, "field": self.field, "reason": self.reason, "raw": self.raw}


@dataclass(slots=True)
class Batch:
    fetches: list[Fetch] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    lines: int = 0  # non-blank lines read into this batch
    position: int = 0  # bytes of the (compressed) file consumed so far
    numbers: list[int] = field(default_factory=list)  # each fetch's line number (or offset)

    def __reduce__(self) -> tuple:
        # Crossing to the main process field by field: 8 -> 5 us per event, both sides.
        columns = fetch_columns(self.fetches)
        return (_batch, (columns, self.rejects, self.lines, self.position, self.numbers))


def _batch(
    columns: tuple[tuple, ...], rejects: list[Reject], lines: int, position: int, numbers: list
) -> Batch:
    return Batch(fetches_from_columns(columns), rejects, lines, position, numbers)


#: Events per batch when a file is replayed (the output does not depend on it).
DEFAULT_BATCH_SIZE = 1000
#: A UTF-8 byte order mark: some editors and Windows tools start a text file with one.
BOM = b"\xef\xbb\xbf"


def read_batches(
    path: Path,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    embedding_dim: int = DEFAULT_EMBEDDING_DIM,
    max_outlinks: int = DEFAULT_MAX_OUTLINKS,
    parallel: bool = False,
    limits: EventLimits = DEFAULT_LIMITS,
) -> Iterator[Batch]:
    """Batches of `batch_size` valid fetches (plus the rejects met on the way), in file order.
    A byte order mark at the start of the file is skipped."""
    args = (path, batch_size, embedding_dim, max_outlinks, limits)
    if not parallel:
        yield from _batches(*args)
        return
    ctx = mp.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    widen_pipe(receiver.fileno())  # a batch crosses in one piece, not 18 (helper_processes)
    reader = ctx.Process(
        target=_produce, args=(sender, os.getpid(), *args), daemon=True, name="events-reader"
    )
    reader.start()
    # Only the reader may hold the sending end: once it is gone, even in the middle of a
    # message, the parent reads end-of-file instead of waiting for the rest forever.
    sender.close()
    inbox = _Inbox(receiver)
    try:
        while True:
            item = _next_item(inbox, reader)
            if item is None:
                break
            if isinstance(item, InputError):
                raise item
            if isinstance(item, str):
                raise RuntimeError(f"events reader failed:\n{item}")
            yield item
    finally:
        if reader.is_alive():
            reader.terminate()
        reader.join()
        inbox.close()


#: Messages the receiving thread may hold before the pipeline takes them.
RECEIVE_AHEAD = 2


class _Inbox:
    """The reader's messages, taken off the pipe by a thread of their own.

    A batch (about 1.1 MB) is larger than the pipe (1 MB at most for an unprivileged
    process), so the last of it crosses only once the reader's sending thread runs again;
    read by the pipeline's own thread, that wait (a few milliseconds a batch, several per
    cent of a replay) was the pipeline's. The receiving thread waits in the read without the
    GIL while the pipeline works, and the pipeline only unpickles a message already here.
    """

    def __init__(self, receiver: Connection) -> None:
        self._receiver = receiver
        self._messages: queue.Queue = queue.Queue(maxsize=RECEIVE_AHEAD)
        self._thread = threading.Thread(target=self._receive, name="events-receiver", daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while True:
            try:
                message = self._receiver.recv_bytes()
            except (EOFError, OSError):  # the reader is gone, perhaps halfway through one
                self._messages.put(None)
                return
            self._messages.put(message)

    def get(self) -> object:
        """The next item; raises EOFError once the pipe has ended."""
        message = self._messages.get()
        if message is None:
            self._messages.put(None)  # every later get ends too
            raise EOFError
        return ForkingPickler.loads(message)

    def close(self) -> None:
        """Wait for the receiving thread, then close the pipe. Called once the reader has
        exited: its end of the pipe is then closed, so the thread's read ends."""
        while self._thread.is_alive():
            # a thread blocked on a full inbox must be let through to see the end
            with contextlib.suppress(queue.Empty):
                self._messages.get_nowait()
            self._thread.join(timeout=0.05)
        self._receiver.close()


def _next_item(inbox: _Inbox, reader: mp.process.BaseProcess) -> object:
    """The reader's next item; an error if it died without a word (killed, or a crash in
    its start-up), rather than waiting for it forever."""
    try:
        return inbox.get()
    except EOFError:  # the reader is gone, perhaps halfway through a message
        reader.join()
        raise RuntimeError(
            f"events reader exited with code {reader.exitcode} before the file's end"
        ) from None


#: Batches the reader may parse ahead of the pipeline.
READ_AHEAD = 8


def _produce(sender: Connection, parent_pid: int, *args: object) -> None:
    """Parse batches in this thread and send them from another, so that parsing runs up to
    `READ_AHEAD` batches ahead while a large batch is still crossing the pipe."""
    run_as_helper(parent_pid)
    outbox: queue.Queue = queue.Queue(maxsize=READ_AHEAD)

    def send() -> None:
        while True:
            item = outbox.get()
            sender.send(item)
            if item is None or isinstance(item, (InputError, str)):
                return

    sending = threading.Thread(target=send, name="events-sender")
    sending.start()
    try:
        for batch in _batches(*args):  # type: ignore[arg-type]
            outbox.put(batch)
        outbox.put(None)
    except InputError as exc:  # the file's fault: the message is what the user needs
        outbox.put(exc)
    except BaseException:
        outbox.put(traceback.format_exc())
    sending.join()
    sender.close()


def _lines(stream: BinaryIO, chunk_size: int = 1 << 20) -> Iterator[bytes]:
    """The lines of a binary stream without their newlines, read a megabyte at a time; a byte
    order mark at its start is left out.

    ``GzipFile`` iterated line by line runs its reader in Python for every line, a sixth of
    the cost of parsing an event; one read per megabyte and a split in C cost little.
    """
    tail = b""
    head = stream.read(len(BOM))
    pending = b"" if head == BOM else head
    while chunk := pending or stream.read(chunk_size):
        pending = b""
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        yield from lines
    if tail:
        yield tail


GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"


def check_events_file(path: Path) -> bool:
    """Whether ``path`` is gzip-compressed, after checking it looks like an events file: not
    empty, not Parquet, and compressed exactly when its name ends in ``.gz``.

    Raises `InputError` saying what is wrong and what to do.
    """
    with open(path, "rb") as fh:
        head = fh.read(4)
    if not head:
        raise InputError(f"{path} is empty: there are no events in it")
    if head == PARQUET_MAGIC:
        raise InputError(
            f"{path} is a Parquet file; events are JSON Lines (one fetched-page event per "
            "line, .gz allowed). A run's features.parquet is read by `lookaround evaluate` "
            "and `lookaround train`, given its run directory"
        )
    compressed = head[:2] == GZIP_MAGIC
    named_gz = path.suffix == ".gz"
    if named_gz and not compressed:
        raise InputError(
            f"{path} is named .gz but is not gzip-compressed (it starts with {head!r}): "
            f"rename it without .gz, or compress it (gzip {path.with_suffix('')})"
        )
    if compressed and not named_gz:
        raise InputError(
            f"{path} is gzip-compressed but its name does not end in .gz: rename it "
            f"to {path.name}.gz"
        )
    return compressed


def open_events(path: Path) -> BinaryIO:
    """An events file opened for reading its lines as bytes (decompressed if .gz), checked by
    `check_events_file`."""
    if check_events_file(path):
        return igzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def unreadable(path: Path, exc: BaseException) -> InputError:
    """The error for an events file whose compressed data breaks off or is corrupt."""
    if isinstance(exc, EOFError):
        what = "is truncated: its gzip stream ends before its end marker"
    else:
        what = f"has corrupt compressed data ({exc})"
    return InputError(
        f"{path} {what} (a copy or download cut short?): nothing was written; get the whole "
        "file again"
    )


def _batches(
    path: Path, batch_size: int, embedding_dim: int, max_outlinks: int, limits: EventLimits
) -> Iterator[Batch]:
    compressed = check_events_file(path)
    with open(path, "rb") as raw:
        stream = igzip.IGzipFile(fileobj=raw) if compressed else raw
        batch = Batch()
        lines = enumerate(_lines(stream), start=1)
        while True:
            try:
                number, line = next(lines)
            except StopIteration:
                break
            except (EOFError, OSError) as exc:  # truncated or corrupt compressed data
                raise unreadable(path, exc) from None
            if not line.strip():
                continue
            batch.lines += 1
            try:
                batch.fetches.append(
                    parse_fetch(
                        line, embedding_dim=embedding_dim, max_outlinks=max_outlinks, limits=limits
                    )
                )
                batch.numbers.append(number)
            except EventError as err:
                text = line[:1000].decode("utf-8", "replace").rstrip("\n")
                batch.rejects.append(Reject(number, err.field, err.reason, text))
            if len(batch.fetches) >= batch_size:
                batch.position = raw.tell()
                yield batch
                batch = Batch()
        batch.position = raw.tell()
        yield batch
