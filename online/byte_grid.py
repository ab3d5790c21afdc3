"""One-byte codes for the IVF lists, scanned as bytes: a grid of 256 values a component.

The IVF lists keep a code per page that a search scans (`online.index.FaissIndex`). FAISS's
uniform 8-bit quantizer (``QT_8bit_uniform``) turns every component of every code back into
a float as it scans. Its *direct* 8-bit codes (``QT_8bit_direct``) are scanned as bytes
against a query that is itself cast to bytes: integer multiply-adds, a faster scan at the
same byte a dimension (``python bench/ivf_codes.py`` measures it). This module puts vectors
and queries on such bytes so that the scan still ranks pages by their inner product:

* a vector's component ``x`` is coded ``s = round(x / step)`` in -128..127 and stored as
  ``s + 128`` (the grid spans the trained range, widened by a fifth each side);
* a query is scaled to use the whole byte range (``round(q * t)``, ``t > 0`` its own) and
  stored the same way;
* the scan's sum of products then holds, besides the wanted ``t / step * q . x``, a term
  of the query alone and ``128 * sum(s)``, which varies from vector to vector: `balance`
  extra dimensions carry ``-sum(s)`` spread over them, against a query's 128 (a signed
  zero) there, so that term is the same for every vector and ranks nothing. Their number
  covers `ROOM` times the largest ``|sum(s)|`` among the vectors trained on, 16 at a time
  (FAISS's byte kernels take 16 dimensions a step): one set of 16 for unit vectors in 192
  dimensions, where that sum spreads like a Gaussian a few hundred wide. A vector past that
  is clamped: its scan numbers are off by the excess, it is ranked as if a little nearer or
  farther; the candidates are re-scored from the stored vectors all the same.

`similarities` turns the scan's numbers back into inner products with the grid's vectors,
from the queries and the bytes they were scanned with.

>>> vectors = np.array([[-0.6, 0.8], [0.8, 0.6]], dtype=np.float32)
>>> grid = ByteGrid.spanning(vectors)
>>> codes = grid.encode(vectors)
>>> codes.shape, int(codes[:, :2].min()) >= 0, int(codes.max()) <= 255
((2, 18), True, True)
>>> queries = grid.encode_queries(vectors)
>>> scanned = queries @ codes.T  # what FAISS's scan sums
>>> (grid.similarities(vectors, queries, scanned).round(2) + 0.0).tolist()
[[1.0, 0.0], [0.0, 1.0]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ByteGrid"]

#: The grid reaches this share of the trained range past it on each side: later pages'
#: vectors may reach past the first pages' (a value past the grid is clamped to its end), at
#: a step 1.4 x as coarse (FAISS's ``rangestat_arg`` for its own uniform quantizer).
WIDEN = 0.2
#: The largest signed code: the grid is -128..127 steps, a byte with 128 added.
TOP = 127
#: Dimensions a step of FAISS's byte kernels: the balance dimensions come this many at a time.
LANES = 16
#: The balance dimensions hold this many times the largest sum of codes trained on.
ROOM = 1.5
#: Vectors a step when the grid is fitted (bounds the temporary copy).
_BLOCK = 16_384


@dataclass(frozen=True)
class ByteGrid:
    """A grid of ``step`` around zero for ``dim`` components, and ``balance`` dimensions."""

    dim: int
    step: float
    balance: int

    @property
    def code_dim(self) -> int:
        """Bytes a code: the components and the balance dimensions."""
        return self.dim + self.balance

    @classmethod
    def spanning(cls, vectors: np.ndarray) -> ByteGrid:
        """The grid over the components' range in ``vectors`` (n, dim), widened by `WIDEN`
        each side, with balance dimensions for `ROOM` times the largest sum of their codes."""
        matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        dim = matrix.shape[1]
        if not matrix.size:
            return cls(dim, 1.0 / TOP, LANES)
        lowest, highest = float(matrix.min()), float(matrix.max())
        width = highest - lowest
        reach = max(abs(lowest), abs(highest)) + WIDEN * width
        step = reach / TOP if reach > 0.0 else 1.0 / TOP
        grid = cls(dim, step, 0)
        sums = max(
            float(np.abs(grid._signed(matrix[lo : lo + _BLOCK]).sum(axis=1)).max())
            for lo in range(0, len(matrix), _BLOCK)
        )
        return cls(dim, step, LANES * max(1, math.ceil(ROOM * sums / (TOP * LANES))))

    def _signed(self, vectors: np.ndarray) -> np.ndarray:
        """Each component's nearest step, -128..127, as float32 (exact there, and so is a
        sum of a code's steps)."""
        signed = np.asarray(vectors, dtype=np.float32) / np.float32(self.step)
        return np.clip(np.rint(signed, out=signed), -TOP - 1, TOP, out=signed)

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        """Codes (n, `code_dim`) of ``vectors`` (n, dim), as float32 holding 0..255: what
        FAISS's direct 8-bit codes store exactly."""
        signed = self._signed(vectors)
        codes = np.empty((len(signed), self.code_dim), dtype=np.float32)
        codes[:, : self.dim] = signed + 128.0
        codes[:, self.dim :] = _spread(-signed.sum(axis=1), self.balance) + 128.0
        return codes

    def encode_queries(self, queries: np.ndarray) -> np.ndarray:
        """Queries (n, dim) as the bytes FAISS's scan multiplies the codes by (n, `code_dim`):
        each scaled to the byte range, 128 (zero) in the balance dimensions."""
        matrix = np.asarray(queries, dtype=np.float64)
        largest = np.abs(matrix).max(axis=1, keepdims=True, initial=0.0)
        scale = np.divide(TOP, largest, out=np.zeros_like(largest), where=largest > 0)
        codes = np.full((len(matrix), self.code_dim), 128.0, dtype=np.float32)
        codes[:, : self.dim] = np.rint(matrix * scale) + 128.0
        return codes

    def similarities(
        self, queries: np.ndarray, query_codes: np.ndarray, scanned: np.ndarray
    ) -> np.ndarray:
        """Inner products (n, k) of ``queries`` (n, dim) with the vectors the codes stand
        for, from the scan's sums of products of the queries' bytes (``query_codes``, as
        `encode_queries` made them) and the codes."""
        matrix = np.asarray(queries, dtype=np.float64)
        signed = np.asarray(query_codes)[:, : self.dim].astype(np.float64) - 128.0
        # the part of the scan's sum that is the same for every code (the balance dimensions
        # make 128 * sum(code) the same), then the query's scale and the step undone
        same = 128.0 * signed.sum(axis=1, keepdims=True) + 128.0 * 128.0 * self.code_dim
        per_unit = np.abs(matrix).max(axis=1, keepdims=True) / TOP * self.step
        return ((np.asarray(scanned, dtype=np.float64) - same) * per_unit).astype(np.float32)


def _spread(totals: np.ndarray, parts: int) -> np.ndarray:
    """Each of ``totals`` (integers) as ``parts`` integers in -128..127 that sum to it (as
    even as possible; clamped where it does not fit)."""
    totals = np.clip(totals, -128 * parts, TOP * parts)
    base = np.floor(totals / parts)
    extra = totals - base * parts  # 0 .. parts-1 of them take one more
    return base[:, None] + (np.arange(parts)[None, :] < extra[:, None])
