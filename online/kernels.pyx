# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled per-event kernels of the pipeline: the inner loops that run once per event, per
interval or per neighbour, where the interpreter's cost per step was most of the work.

Each kernel is an exact stand-in for the Python it replaced (the tests compare them with
plain-Python statements of the same rules on arbitrary input): it takes and returns plain
Python objects and arrays, reads no global state and does no I/O.

* `HistoryUpdate`: `online.history.update` (the page-state transition);
* `weighted_stat_means`: related pages' weighted stat means (look-around features);
* `own_history_values`: the numbers own features are computed from, out of page states;
* `iso_utc_many`: epoch microseconds to ISO-8601 text;
* `SlotRecord`: slots-class instances from positional values (the `Fetch` constructor);
* `gather_half`: rows of a half-precision matrix as float32 (the index's stored vectors).
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.math cimport NAN
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t
from libc.stdio cimport snprintf

from online._le cimport load_u32le

import numpy as np


cdef extern from "Python.h":
    ctypedef int (*descrsetfunc)(object, object, object) except -1
    ctypedef struct PyTypeObject:
        descrsetfunc tp_descr_set
    PyTypeObject* Py_TYPE(object)
    object PyUnicode_DecodeASCII(const char*, Py_ssize_t, const char*)


# -- page history -------------------------------------------------------------------------------

cdef double SECONDS_PER_DAY = 86400.0


cdef class HistoryUpdate:
    """`online.history.update` for a `Fetch`: ``(state | None, fetch, history) -> (state,
    emitted)``, compiled. Built once with the history module's record types, so it returns
    exactly the named tuples the Python code would.

    The new-link count walks the two sorted fingerprint lists side by side instead of building
    two sets (fingerprints of one fetch are sorted and distinct by construction; lists that are
    not are counted through sets, as before).
    """

    cdef object PageState, Interval, Emitted
    cdef object duplicate, stale
    cdef tuple nan_sp, nan_sn
    cdef object nan

    def __init__(self, PageState, Interval, Emitted, object nan, tuple nan_sp, tuple nan_sn):
        if tuple(PageState._fields[:2]) != ("last_fetched_at", "last_ok_at") or len(
            PageState._fields
        ) != 13:
            raise TypeError("PageState's fields are not the ones this kernel was written for")
        self.PageState = PageState
        self.Interval = Interval
        self.Emitted = Emitted
        self.duplicate = Emitted("duplicate")
        self.stale = Emitted("stale")
        self.nan = nan
        self.nan_sp = nan_sp
        self.nan_sn = nan_sn

    @cython.boundscheck(True)
    def __call__(self, object state, object fetch, Py_ssize_t history):
        cdef double ts = fetch.timestamp
        cdef double last_fetched_at
        cdef bint first = state is None
        cdef tuple old, old_sn, sn, sp, window
        cdef object interval = None, last_ok, content_fp, old_content_fp
        cdef Py_ssize_t new_internal = 0, new_external = 0, n
        cdef int status
        cdef bytes packed, old_packed
        cdef bint had_ok
        if not first:
            if type(state) is not self.PageState:
                raise TypeError(f"expected a PageState, got {type(state).__name__}")
            old = <tuple> state  # checked just above: a PageState, a tuple of 13
            last_fetched_at = <double> old[0]
            if ts == last_fetched_at:
                return state, self.duplicate
            if ts < last_fetched_at:
                return state, self.stale
            old_sn = <tuple?> old[12]
        else:
            old = None
            old_sn = self.nan_sn
        sn = (
            old_sn[0] if fetch.inlinks_internal is None else fetch.inlinks_internal,
            old_sn[1] if fetch.inlinks_external is None else fetch.inlinks_external,
            old_sn[2] if fetch.pagerank is None else fetch.pagerank,
            old_sn[3] if fetch.trustrank is None else fetch.trustrank,
        )
        status = fetch.status
        if not 200 <= status < 300:
            if first:
                return self._new(
                    (ts, None, status, 1, 1, 0, 0, 0, b"", (), self.nan_sp, self.nan_sp, sn)
                ), self.Emitted("applied", None, True)
            return self._new(
                (ts, old[1], status, old[3] + 1, old[4] + 1, old[5], old[6], old[7], old[8],
                 old[9], old[10], old[11], sn)
            ), self.Emitted("applied", None, False)

        nan = self.nan
        size, text_size, quality = fetch.content_size, fetch.text_size, fetch.text_quality
        sp = (
            nan if size is None else size,
            nan if text_size is None else text_size,
            nan if quality is None else quality,
            float(fetch.internal_outlinks),
            float(fetch.external_outlinks),
        )
        content_fp = fetch.content_digest_fp
        packed = _kept_fingerprints(fetch.outlink_fps)
        if first:
            return self._new(
                (ts, ts, status, 1, 0, 0, content_fp or 0, 0, packed, (), sp, self.nan_sp, sn)
            ), self.Emitted("applied", None, True)
        last_ok = old[1]
        had_ok = last_ok is not None
        window = <tuple?> old[9]
        if had_ok:
            old_packed = <bytes?> old[8]
            if packed != old_packed:
                new_internal, new_external = _new_links(
                    packed, fetch.outlink_internal, old_packed
                )
            old_content_fp = old[6]
            interval = self.Interval(
                new_internal,
                new_external,
                bool(content_fp and old_content_fp and content_fp != old_content_fp),
                <double> <float> ((ts - <double> last_ok) / SECONDS_PER_DAY),
            )
            if history > 0:
                n = len(window)
                window = window[n + 1 - history:] + (interval,) if n + 1 > history else window + (interval,)
            else:
                window = ()
        return self._new(
            (
                ts,
                ts,
                status,
                old[3] + 1,
                old[4],
                old[5] + (interval is not None),
                content_fp or old[6],
                old[7],
                packed,
                window,
                sp,
                old[10] if had_ok else old[11],
                sn,
            )
        ), self.Emitted("applied", interval, False)

    cdef inline object _new(self, tuple values):
        return tuple.__new__(self.PageState, values)


cdef bytes _kept_fingerprints(bytes packed):
    """A fetch's outlink fingerprints as a page state keeps them: each with its low byte
    cleared (its top 24 bits, still sorted; `online.history.kept_fingerprints`)."""
    cdef Py_ssize_t size = len(packed), i
    if size == 0:
        return packed
    cdef bytes out = PyBytes_FromStringAndSize(PyBytes_AS_STRING(packed), size)
    cdef uint8_t* p = <uint8_t*> PyBytes_AS_STRING(out)
    for i in range(0, size - 3, 4):
        p[i] = 0
    return out


cdef tuple _new_links(bytes packed, bytes flags, bytes old_packed):
    """(new internal, new external) links: fingerprints in ``packed`` but not in ``old_packed``,
    each counted by its flag in ``flags``."""
    cdef Py_ssize_t n = len(packed) // 4, m = len(old_packed) // 4, i = 0, j = 0
    cdef const uint8_t* a = <const uint8_t*> PyBytes_AS_STRING(packed)
    cdef const uint8_t* b = <const uint8_t*> PyBytes_AS_STRING(old_packed)
    cdef const uint8_t* f = <const uint8_t*> PyBytes_AS_STRING(flags)
    cdef uint32_t x, y, previous = 0
    cdef Py_ssize_t internal = 0, external = 0
    if len(flags) < n or not _strictly_increasing(a, n) or not _strictly_increasing(b, m):
        return _new_links_by_sets(packed, flags, old_packed)
    while i < n:
        x = load_u32le(a + 4 * i)
        while j < m and load_u32le(b + 4 * j) < x:
            j += 1
        if j == m or load_u32le(b + 4 * j) != x:
            if f[i]:
                internal += 1
            else:
                external += 1
        i += 1
    return internal, external


cdef bint _strictly_increasing(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(1, n):
        if load_u32le(p + 4 * i) <= load_u32le(p + 4 * (i - 1)):
            return False
    return True


def _new_links_by_sets(bytes packed, bytes flags, bytes old_packed):
    """The general count: each distinct new fingerprint once, with the flag of its first
    position (for fingerprint lists that are not sorted and distinct)."""
    import struct
    fps = struct.unpack(f"<{len(packed) // 4}I", packed)
    old = set(struct.unpack(f"<{len(old_packed) // 4}I", old_packed))
    first = {}
    for position, fp in enumerate(fps):
        first.setdefault(fp, position)
    new = [fp for fp in first if fp not in old]
    internal = sum(1 for fp in new if flags[first[fp]])
    return internal, len(new) - internal


# -- features -------------------------------------------------------------------------------------


ctypedef fused stat_t:
    float
    double


def weighted_stat_means(
    const double[:, ::1] weights, const stat_t[:, ::1] versions, const int64_t[:, ::1] version
):
    """``(means, known_weight)`` of related pages' stats, both (rows, stats) float64: for row i
    and stat f, the weighted mean of ``versions[version[i, j], f]`` over slots j with a version
    (>= 0) where that value is not NaN, and the weight those slots carry. Sums run over the
    slots in order, so a row is the same whatever the batch; a mean with no known weight is NaN.

    >>> import numpy as np
    >>> stats = np.array([[1.0, np.nan], [3.0, 4.0]], np.float32)
    >>> means, known = weighted_stat_means(
    ...     np.array([[0.25, 0.75]]), stats, np.array([[0, 1]], np.int64))
    >>> means.tolist(), known.tolist()
    ([[2.5, 4.0]], [[1.0, 0.75]])
    """
    cdef Py_ssize_t rows = weights.shape[0], k = weights.shape[1], n_stats = versions.shape[1]
    cdef Py_ssize_t i, j, f
    cdef int64_t v
    cdef double w, x
    if version.shape[0] != rows or version.shape[1] != k:
        raise ValueError("weights and version must have the same shape")
    means_arr = np.zeros((rows, n_stats), dtype=np.float64)
    known_arr = np.zeros((rows, n_stats), dtype=np.float64)
    cdef double[:, ::1] num = means_arr
    cdef double[:, ::1] den = known_arr
    with nogil:
        for i in range(rows):
            for j in range(k):
                v = version[i, j]
                if v < 0:
                    continue
                if v >= versions.shape[0]:
                    with gil:
                        raise IndexError(f"stats version {v} out of range")
                w = weights[i, j]
                for f in range(n_stats):
                    x = versions[v, f]
                    if x == x:  # not NaN
                        den[i, f] += w
                        num[i, f] += w * x
            for f in range(n_stats):
                num[i, f] = num[i, f] / den[i, f] if den[i, f] > 0 else NAN
    return means_arr, known_arr


def own_history_values(list states, Py_ssize_t history):
    """The numbers `online.features.own_feature_matrix` reads from page states, in arrays:
    ``(head (n, 16): sp, sp_previous, sn, fetches, errors; lags (n, history, 4): the window's
    intervals most recent first (new internal, new external, content changed, days), NaN past
    its length; lengths (n,))``.

    >>> from online.history import PageState, Interval
    >>> s = PageState(0.0, window=(Interval(1, 0, False, 2.0), Interval(3, 1, True, 1.0)))
    >>> head, lags, lengths = own_history_values([s], 3)
    >>> lags[0, :2].tolist(), lengths.tolist()
    ([[3.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 2.0]], [2])
    """
    cdef Py_ssize_t n = len(states), i, j, f, w_len, take
    head_arr = np.empty((n, 16), dtype=np.float64)
    lags_arr = np.full((n, max(history, 0), 4), NAN, dtype=np.float64)
    lengths_arr = np.zeros(n, dtype=np.int64)
    cdef double[:, ::1] head = head_arr
    cdef double[:, :, ::1] lags = lags_arr
    cdef int64_t[::1] lengths = lengths_arr
    cdef object state, window, interval, part
    for i in range(n):
        state = states[i]
        if not isinstance(state, tuple) or len(<tuple> state) != 13:
            raise TypeError(f"expected a PageState, got {type(state).__name__}")
        f = 0
        for part in ((<tuple> state)[10], (<tuple> state)[11], (<tuple> state)[12]):
            for j in range(len(part)):
                if f < 14:
                    head[i, f] = float(part[j])
                f += 1
        if f != 14:
            raise ValueError("a PageState with sp, sp_previous and sn of unexpected lengths")
        head[i, 14] = float((<tuple> state)[3])
        head[i, 15] = float((<tuple> state)[4])
        window = (<tuple> state)[9]
        w_len = len(window)
        take = min(w_len, max(history, 0))
        lengths[i] = take
        for j in range(take):
            interval = window[w_len - 1 - j]
            for f in range(4):
                lags[i, j, f] = float(interval[f])
    return head_arr, lags_arr, lengths_arr


# -- times ----------------------------------------------------------------------------------------


cdef inline void _civil(int64_t days, int64_t* year, int* month, int* day) noexcept nogil:
    """Proleptic Gregorian date of a day count from 1970-01-01 (H. Hinnant's algorithm)."""
    cdef int64_t z = days + 719468
    cdef int64_t era = (z if z >= 0 else z - 146096) // 146097
    cdef int64_t doe = z - era * 146097
    cdef int64_t yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    cdef int64_t doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    cdef int64_t mp = (5 * doy + 2) // 153
    day[0] = <int> (doy - (153 * mp + 2) // 5 + 1)
    month[0] = <int> (mp + 3 if mp < 10 else mp - 9)
    year[0] = yoe + era * 400 + (month[0] <= 2)


def iso_utc_many(const int64_t[::1] micros):
    """UTC times given in epoch microseconds as ISO-8601 text: ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``
    (the fraction only when not zero), as ``datetime.isoformat`` writes them. Years 1 to 9999.

    >>> import numpy as np
    >>> iso_utc_many(np.array([0, 1_700_000_000_250_000], np.int64))
    ['1970-01-01T00:00:00Z', '2023-11-14T22:13:20.250000Z']
    """
    cdef Py_ssize_t n = micros.shape[0], i
    cdef int64_t us, seconds, days, rest, year
    cdef int month, day, frac
    cdef char buffer[40]
    cdef list out = [None] * n
    cdef int length
    for i in range(n):
        us = micros[i]
        seconds = us // 1000000 if us >= 0 else -((-us + 999999) // 1000000)
        frac = <int> (us - seconds * 1000000)
        days = seconds // 86400 if seconds >= 0 else -((-seconds + 86399) // 86400)
        rest = seconds - days * 86400
        _civil(days, &year, &month, &day)
        if year < 1 or year > 9999:
            raise ValueError(f"time outside years 1 to 9999: {us} us from the epoch")
        if frac:
            length = snprintf(
                buffer, 40, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", <int> year, month, day,
                <int> (rest // 3600), <int> (rest // 60 % 60), <int> (rest % 60), frac
            )
        else:
            length = snprintf(
                buffer, 40, "%04d-%02d-%02dT%02d:%02d:%02dZ", <int> year, month, day,
                <int> (rest // 3600), <int> (rest // 60 % 60), <int> (rest % 60)
            )
        out[i] = PyUnicode_DecodeASCII(buffer, length, NULL)
    return out


# -- records --------------------------------------------------------------------------------------


cdef class SlotRecord:
    """Builds instances of a slots class from positional values by calling each slot's own
    setter, the way a frozen dataclass's generated ``__init__`` stores fields, without the
    per-field Python calls (the reader builds, and the pipeline unpickles, a `Fetch` per event).

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True, slots=True)
    ... class Point:
    ...     x: int
    ...     y: int = 0
    >>> SlotRecord(Point, ("x", "y"))(1, 2)
    Point(x=1, y=2)
    """

    cdef object cls
    cdef tuple setters
    cdef Py_ssize_t n

    def __init__(self, cls, tuple fields):
        self.cls = cls
        self.setters = tuple(getattr(cls, name) for name in fields)
        self.n = len(fields)

    def __call__(self, *values):
        cdef Py_ssize_t i
        cdef object descriptor
        if len(values) != self.n:
            raise TypeError(f"{self.cls.__name__} takes {self.n} values, got {len(values)}")
        cdef object record = self.cls.__new__(self.cls)
        for i in range(self.n):
            descriptor = self.setters[i]
            Py_TYPE(descriptor).tp_descr_set(descriptor, record, values[i])
        return record


# -- half-precision rows ------------------------------------------------------------------------

# Every half-precision value as float32, indexed by its bits (256 KB): numpy's float16 ->
# float32 cast runs element by element, at about 1.6 ns per value; a table lookup in the
# gather loop costs a fraction of that.
_HALF_TABLE = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
cdef const float[::1] _half = _HALF_TABLE


def gather_half(const uint16_t[:, ::1] halves, const int64_t[::1] rows):
    """``halves[rows]`` (a float16 matrix viewed as uint16) as a new float32 matrix, the same
    values as ``matrix[rows].astype(np.float32)``.

    >>> import numpy as np
    >>> m = np.array([[1.0, -2.5], [65504.0, 1e-7]], dtype=np.float16)
    >>> gather_half(m.view(np.uint16), np.array([1, 0, 1])).tolist()
    [[65504.0, 1.1920928955078125e-07], [1.0, -2.5], [65504.0, 1.1920928955078125e-07]]
    """
    cdef Py_ssize_t n = rows.shape[0], dim = halves.shape[1], i, j, row
    cdef Py_ssize_t count = halves.shape[0]
    out = np.empty((n, dim), dtype=np.float32)
    cdef float[:, ::1] o = out
    cdef const float* table = &_half[0]
    for i in range(n):
        row = rows[i]
        if row < 0 or row >= count:
            raise IndexError(f"row {row} outside 0..{count - 1}")
        for j in range(dim):
            o[i, j] = table[halves[row, j]]
    return out
