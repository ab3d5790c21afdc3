"""A cluster write's journal: the batch's script calls, phase by phase, as one blob.

On a Redis Cluster a batch's write is one script per hash slot, so a worker that dies part
way leaves some slots written (`streams.redis_store`). Before the first script the store
writes the whole batch, every call with its keys and arguments, to one key of its own; a
worker starting again re-runs those calls (each idempotent) before it reads anything, so the
store ends as the batch left it, as on one server, and the redelivered events are duplicates.

Layout (all integers little-endian): the version byte, the call count (u32), then per call:
its phase (u8), its tag (u32), its script's name, its key count (u32), its keys, its argument
count (u32), its arguments; each name, key and argument a u32 length then its bytes. Never
pickle: a blob is parsed, and a damaged or foreign one is refused with a ValueError.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

VERSION = 1
_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<BI")  # phase, tag


@dataclass(frozen=True)
class JournalCall:
    """One script call of a batch's write: the phase it belongs to (they run in order), the
    hash tag its keys share, the script's name, its keys and its arguments."""

    phase: int
    tag: int
    script: str
    keys: list[bytes]
    args: list[bytes]


def as_bytes(value: Any) -> bytes:
    """An argument as Redis receives it (redis-py sends an int as its decimal digits)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value).encode()
    raise TypeError(f"a script argument must be bytes, str or int, not {type(value).__name__}")


def encode(calls: Iterable[JournalCall]) -> bytes:
    """The journal of ``calls`` (in the order they are to run)."""
    parts: list[bytes] = []
    count = 0
    for call in calls:
        count += 1
        parts.append(_HEAD.pack(call.phase, call.tag))
        parts.append(_chunk(call.script.encode()))
        for items in (call.keys, call.args):
            parts.append(_U32.pack(len(items)))
            parts.extend(_chunk(item) for item in items)
    return _U8.pack(VERSION) + _U32.pack(count) + b"".join(parts)


def decode(blob: bytes) -> list[JournalCall]:
    """The calls of a journal; a blob that is not one (another version, cut short, bytes
    left over) raises ValueError."""
    view = memoryview(blob)
    if len(view) < 5 or view[0] != VERSION:
        raise ValueError("not a lookaround write journal (version byte)")
    (count,) = _U32.unpack_from(view, 1)
    at = 5
    calls: list[JournalCall] = []
    try:
        for _ in range(count):
            phase, tag = _HEAD.unpack_from(view, at)
            at += _HEAD.size
            script, at = _read_chunk(view, at)
            keys, at = _read_list(view, at)
            args, at = _read_list(view, at)
            calls.append(JournalCall(phase, tag, script.decode(), keys, args))
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"a damaged write journal: {exc}") from exc
    if at != len(view):
        raise ValueError(f"a damaged write journal: {len(view) - at} bytes after its calls")
    return calls


def _chunk(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _read_chunk(view: memoryview, at: int) -> tuple[bytes, int]:
    (size,) = _U32.unpack_from(view, at)
    at += _U32.size
    if at + size > len(view):
        raise struct.error("a length past the end")
    return bytes(view[at : at + size]), at + size


def _read_list(view: memoryview, at: int) -> tuple[list[bytes], int]:
    (n,) = _U32.unpack_from(view, at)
    at += _U32.size
    items = []
    for _ in range(n):
        item, at = _read_chunk(view, at)
        items.append(item)
    return items, at
