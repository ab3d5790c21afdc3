"""Learned state as data: a versioned, self-describing byte format that cannot run code.

A worker's learned state (`online.ensemble_state.EnsembleState`, the River learner inside it) is
saved where others may write (Redis). Pickle would run whatever a crafted blob asks for on
load, so state is stored as JSON instead: plain numbers, strings, lists and maps, and numpy
arrays as little-endian bytes of an allowed dtype. Decoding builds nothing but those; a blob
that is not this format (a pickle, another format version, a truncated write) is refused with
`StateRefused`, saying what was found.

Layout: ``MAGIC``; the length of a JSON header (4 bytes, little-endian) and the header
``{"format": 1, "kind": ..., "data": ...}``; then the arrays' bytes, one after another. In
``data`` an array is ``{"$nd": [dtype, shape, offset]}`` (its bytes start ``offset`` bytes into
that tail), so the bulk of a state (the labelled rows waiting for an epoch) is copied, not
text-encoded. Floats keep their exact bits (JSON numbers written by ``repr``, ``Infinity`` /
``NaN`` allowed), so a restored state scores exactly as the saved one would have.

>>> blob = dumps("demo", {"w": np.arange(3, dtype=np.float64), "n": 2, "inf": math.inf})
>>> blob[:len(MAGIC)] == MAGIC
True
>>> out = loads(blob, "demo")
>>> out["w"].tolist(), out["n"], out["inf"]
([0.0, 1.0, 2.0], 2, inf)
>>> loads(b"\\x80\\x05\\x95...", "demo")
Traceback (most recent call last):
...
online.state_codec.StateRefused: not a state blob (starts b'\\x80\\x05\\x95...', a pickle?)
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

MAGIC = b"LOOKAROUND-STATE\n"
FORMAT = 1
#: The array dtypes a blob may hold (nothing with objects in it).
DTYPES = frozenset({"<f8", "<f4", "<i8", "<i4", "|b1", "|u1"})
_ARRAY = "$nd"


class StateRefused(ValueError):
    """A stored state that is not ours to load (not this format, another version, damaged)."""


def dumps(kind: str, data: Any) -> bytes:
    """``data`` (dicts with str keys, lists, tuples, str, int, float, bool, None, numpy arrays
    and scalars) as a state blob of ``kind``."""
    buffers: list[bytes] = []
    body = {"format": FORMAT, "kind": kind, "data": _encode(data, buffers)}
    header = json.dumps(body, separators=(",", ":"), allow_nan=True).encode()
    return b"".join([MAGIC, len(header).to_bytes(4, "little"), header, *buffers])


def loads(blob: bytes, kind: str) -> Any:
    """The data of a blob written by `dumps` for ``kind``; `StateRefused` for anything else."""
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise StateRefused(f"expected bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if not blob.startswith(MAGIC):
        hint = ", a pickle?" if blob[:1] == b"\x80" else ""
        raise StateRefused(f"not a state blob (starts {blob[:8]!r}{hint})")
    at = len(MAGIC) + 4
    size = int.from_bytes(blob[len(MAGIC) : at], "little")
    if len(blob) < at + size:
        raise StateRefused(f"damaged state blob: header of {size} bytes, {len(blob) - at} left")
    try:
        body = json.loads(blob[at : at + size])
    except (ValueError, UnicodeDecodeError) as exc:
        raise StateRefused(f"damaged state blob: {exc}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        found = body.get("format") if isinstance(body, dict) else None
        raise StateRefused(f"state format {found!r}, this version reads format {FORMAT}")
    if body.get("kind") != kind:
        raise StateRefused(f"a {body.get('kind')!r} state where a {kind!r} state was expected")
    return _decode(body.get("data"), memoryview(blob)[at + size :])


def _encode(value: Any, buffers: list[bytes]) -> Any:
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
        code = dtype.str
        if code not in DTYPES:
            raise TypeError(f"cannot store an array of dtype {array.dtype} as data")
        offset = sum(len(b) for b in buffers)
        buffers.append(array.astype(dtype, copy=False).tobytes())
        return {_ARRAY: [code, list(array.shape), offset]}
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or k == _ARRAY:
                raise TypeError(f"state keys must be strings (not {_ARRAY!r}), got {k!r}")
            out[k] = _encode(v, buffers)
        return out
    if isinstance(value, list | tuple):
        return [_encode(v, buffers) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} as data")


def _decode(value: Any, tail: memoryview) -> Any:
    if isinstance(value, dict):
        if _ARRAY in value:
            return _array(value[_ARRAY], tail)
        return {k: _decode(v, tail) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, tail) for v in value]
    return value


def _array(spec: Any, tail: memoryview) -> np.ndarray:
    try:
        code, shape, offset = spec
        if code not in DTYPES:
            raise StateRefused(f"array dtype {code!r} is not allowed in a state blob")
        dtype = np.dtype(code)
        shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in shape) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"shape {shape}, offset {offset!r}")
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset + size > len(tail):
            raise ValueError(f"{size} bytes at {offset}, the blob has {len(tail)}")
        return np.frombuffer(tail[offset : offset + size], dtype=dtype).reshape(shape).copy()
    except StateRefused:
        raise
    except (TypeError, ValueError) as exc:
        raise StateRefused(f"damaged array in state blob: {exc}") from None


__all__ = ["DTYPES", "FORMAT", "MAGIC", "StateRefused", "dumps", "loads"]
_ = math
