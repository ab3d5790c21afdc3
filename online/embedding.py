"""Page text -> 192-d unit semantic vector, without downloading a model.

The paper's related pages are the k nearest neighbours of a page by cosine similarity of
unit vectors. :class:`HashingTextEmbedder` is the built-in stand-in for a sentence encoder:
a count sketch of word unigrams and bigrams, so that pages sharing vocabulary and phrases
end up close. It is deterministic (xxhash, no learned state), so every worker and every
replay gives the same vector for the same text, and it costs ~0.1 ms per page.

>>> emb = HashingTextEmbedder(dim=8)
>>> v = emb.embed("Hello world")
>>> v.shape, v.dtype, round(float(v @ v), 5)
((8,), dtype('float32'), 1.0)
>>> emb.embed("  ...  ") is None
True
>>> vector_fingerprint(v) == vector_fingerprint(emb.embed("hello, WORLD!"))
True
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from itertools import repeat

import numpy as np
import xxhash

__all__ = ["HashingTextEmbedder", "vector_fingerprint", "vector_from_list"]


def _combining_marks() -> str:
    """Regex class body of every BMP combining mark (Mn/Mc/Me).

    ``\\w`` excludes them, which would cut Arabic words with harakat or Devanagari words
    at every vowel sign; adding them to the token class keeps such words whole.
    """
    ranges: list[tuple[int, int]] = []
    for cp in range(0x300, 0x10000):
        if unicodedata.category(chr(cp)) in ("Mn", "Mc", "Me"):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    return "".join(f"\\u{a:04x}-\\u{b:04x}" if b > a else f"\\u{a:04x}" for a, b in ranges)


# Scripts written without spaces (Chinese, Japanese kana) are split into single characters,
# so that word bigrams become character bigrams, the usual bag-of-ngrams for CJK.
_CJK = "\u3040-\u30ff\u3100-\u312f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_MARKS = _combining_marks()
# Group 1: a run of CJK characters (split into characters); group 2: a word, marks included.
_RUNS = re.compile(f"([{_CJK}]+)|((?:[^\\W{_CJK}]+[{_MARKS}]*)+)")
_ASCII_WORD = re.compile(r"\w+")  # the same rule on ASCII text, and much faster
# Full-width ASCII and the ideographic space, common in CJK pages, folded up front: NFKC
# maps them the same way but takes ~10x longer once a text has any of them.
_FULL_WIDTH = re.compile("[\uff01-\uff5e\u3000]")


def _fold_width(match: re.Match[str]) -> str:
    char = match.group()
    return " " if char == "\u3000" else chr(ord(char) - 0xFEE0)


_BIGRAM_MUL = np.uint64(0x9E3779B97F4A7C15)
_FMIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
_LO32 = np.uint64(0xFFFFFFFF)


def _fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: spreads the combined bigram hash over all bits."""
    h = h ^ (h >> np.uint64(33))
    h = h * _FMIX_1
    h = h ^ (h >> np.uint64(33))
    h = h * _FMIX_2
    return h ^ (h >> np.uint64(33))


class HashingTextEmbedder:
    """Deterministic text -> unit vector embedder that downloads nothing.

    Features are the NFKC-normalised, case-folded word tokens and word bigrams, weighted
    by sublinear term frequency (1 + log tf). Each feature adds ``±w`` to two buckets
    chosen by its hash (a count sketch with two rows), which halves the damage of any
    single bucket collision in only 192 dimensions. The vector is L2-normalised, so the
    inner product of two embeddings is their cosine similarity.

    >>> emb = HashingTextEmbedder()
    >>> a = emb.embed("Cheap flights to Paris and Rome")
    >>> b = emb.embed("cheap flights to Rome")
    >>> c = emb.embed("Protein folding in yeast cells")
    >>> bool(a @ b > a @ c), a.shape
    (True, (192,))
    >>> emb.embed("東京の天気") is not None and emb.embed("") is None
    True
    """

    def __init__(self, dim: int = 192, seed: int = 0) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.dim = int(dim)
        self.seed = int(seed)

    def tokens(self, text: str) -> list[str]:
        """The word tokens :meth:`embed` hashes (useful to inspect what a page says)."""
        if text.isascii():
            return _ASCII_WORD.findall(text.lower())
        text = unicodedata.normalize("NFKC", _FULL_WIDTH.sub(_fold_width, text)).casefold()
        if text.isascii():
            return _ASCII_WORD.findall(text)
        return [tok for cjk, word in _RUNS.findall(text) for tok in (cjk or (word,))]

    def embed(self, text: str) -> np.ndarray | None:
        """float32 ``(dim,)`` unit vector, or None when the text has no word token."""
        tokens = self.tokens(text)
        if not tokens:
            return None
        hashes = map(xxhash.xxh64_intdigest, tokens, repeat(self.seed))
        uni = np.fromiter(hashes, dtype=np.uint64, count=len(tokens))
        if len(uni) > 1:
            # Order-sensitive combination: "new york" and "york new" are different bigrams.
            left = uni[:-1] * _BIGRAM_MUL
            right = (uni[1:] << np.uint64(31)) | (uni[1:] >> np.uint64(33))
            feats = np.concatenate([uni, _fmix64(left ^ right ^ _BIGRAM_MUL)])
        else:
            feats = uni
        keys, counts = np.unique(feats, return_counts=True)
        weight = 1.0 + np.log(counts)
        lo = keys & _LO32
        hi = keys >> np.uint64(32)
        dim = np.uint64(self.dim)
        # Lemire's multiply-shift reduction takes the bucket from the high bits of each
        # 32-bit half, leaving the half's lowest bit free to pick the sign.
        first, second = (lo * dim) >> np.uint64(32), (hi * dim) >> np.uint64(32)
        first_sign, second_sign = lo & np.uint64(1), hi & np.uint64(1)
        # A feature whose two buckets coincide must not cancel itself out.
        second_sign = np.where(first == second, first_sign, second_sign)
        buckets = np.concatenate([first, second])
        signs = np.concatenate([first_sign, second_sign]).astype(np.float64)
        values = np.tile(weight, 2) * (1.0 - 2.0 * signs)
        vec = np.bincount(buckets.astype(np.intp), weights=values, minlength=self.dim)
        # fsum is exactly rounded, so the norm does not depend on the BLAS build or CPU.
        norm = math.sqrt(math.fsum((vec * vec).tolist()))
        if norm == 0.0:
            # Different features cancelled each other exactly (vanishingly rare): the text
            # still has words, so it gets a direction, the first feature's bucket.
            vec[int(buckets[0])] = 1.0
            norm = 1.0
        return (vec / norm).astype(np.float32)

    def __repr__(self) -> str:
        return f"HashingTextEmbedder(dim={self.dim}, seed={self.seed})"


def vector_from_list(values: Sequence[float], dim: int) -> np.ndarray:
    """A stored or received vector as float32 C-contiguous unit vector of length ``dim``.

    Vectors from JSON or a store are re-normalised, so that inner products stay cosine
    similarities even after a lossy round trip. Raises ValueError for a wrong length,
    non-finite values or the zero vector (it has no direction).

    >>> vector_from_list([3, 4], 2).tolist()
    [0.6000000238418579, 0.800000011920929]
    """
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.shape[0] != dim:
        raise ValueError(f"expected a vector of length {dim}, got {arr.shape[0]}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("vector has non-finite values")
    norm = float(np.sqrt(arr @ arr))
    if norm == 0.0:
        raise ValueError("the zero vector has no direction")
    return np.ascontiguousarray(arr / norm, dtype=np.float32)


def vector_fingerprint(vec: np.ndarray) -> int:
    """Stable 32-bit fingerprint of a vector's float32 bytes; never 0 ("no vector").

    Lets a store tell cheaply whether a page's embedding changed since last crawl.
    """
    data = np.ascontiguousarray(vec, dtype="<f4")
    return xxhash.xxh32_intdigest(data.tobytes()) or 1
