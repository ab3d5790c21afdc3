# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled per-event kernels of the pipeline: the inner loops that run once per event, per
interval or per neighbour, where the interpreter's cost per step was most of the work.

Each kernel is an exact stand-in for the Python it replaced (the tests compare them with
plain-Python statements of the same rules on arbitrary input): it takes and returns plain
Python objects and arrays, reads no global state and does no I/O.

* `HistoryUpdate`: `online.history.update` (the page-state transition);
* `weighted_stat_means`: related pages' weighted stat means (look-around features);
* `own_history_values` / `own_feature_rows`: the numbers own features are computed from, out
  of page states, and the own-feature rows themselves;
* `iso_utc_many`: epoch microseconds to ISO-8601 text;
* `SlotRecord`: slots-class instances from positional values (the `Fetch` constructor);
* `gather_half`: rows of a half-precision matrix as float32 (the index's stored vectors);
* `gathered_dots`: each query's exact similarities to its candidates (related pages' rerank);
* `top_k_rows`: each row's k largest entries, best first (the IVF centroids' ranking);
* `encode_neighbours` / `decode_neighbours`: a related-page list (`online.stores.Neighbours`)
  as stored and read back;
* `record_sections` / `merge_page_records`: one section of each of the embedded store's page
  records, and records rebuilt with some sections replaced;
* `direction_cosine`: a changed vector's cosine to the direction its related pages were
  found with;
* `direction_codes`: that direction as int8 codes, kept when related pages are searched;
* `record_head_stats`: the stats rows out of Redis page-record heads (the stats read).
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING
from libc.math cimport INFINITY, NAN, isnan
from libc.stdint cimport int8_t, int64_t, uint8_t, uint16_t, uint32_t
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
            if type(part) is tuple:  # as states are made: items read without a call each
                for j in range(len(<tuple> part)):
                    if f < 14:
                        head[i, f] = <double> (<tuple> part)[j]
                    f += 1
            else:
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
            if isinstance(interval, tuple) and len(<tuple> interval) == 4:
                for f in range(4):
                    lags[i, j, f] = <double> (<tuple> interval)[f]
            else:
                for f in range(4):
                    lags[i, j, f] = float(interval[f])
    return head_arr, lags_arr, lengths_arr


def own_feature_rows(list states, list depths, Py_ssize_t history):
    """`online.features.own_feature_matrix` in one pass: each page's own-feature row (float64,
    ``28 + 4 * history`` columns) from its state and its URL's (path, domain) depths, with
    the arithmetic of the column version it replaced: window sums run over the lags most
    recent first, from 0.0, a lag past the window adding zeros; a mean is a sum over the
    window's length; the aggregates after the first three are NaN for an empty window.

    >>> from online.history import PageState, Interval
    >>> window = (Interval(1, 0, False, 2.0), Interval(3, 1, True, 1.0))
    >>> row = own_feature_rows([PageState(0.0, fetches=3, window=window)], [(1.0, 2.0)], 2)[0]
    >>> row[5:7].tolist(), row[16:24].tolist()  # the depths; the lags, most recent first
    ([1.0, 2.0], [3.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 2.0])
    >>> row[24:30].tolist()  # intervals, fetches, errors, mean new internal and external, ...
    [2.0, 3.0, 0.0, 2.0, 0.5, 1.0]
    """
    head_arr, lags_arr, lengths_arr = own_history_values(states, history)
    cdef Py_ssize_t n = len(states), h = max(history, 0), i, j, f, col
    if len(depths) != n:
        raise ValueError(f"{len(depths)} depths for {n} states")
    cdef double[:, ::1] head = head_arr
    cdef double[:, :, ::1] lags = lags_arr
    cdef int64_t[::1] lengths = lengths_arr
    out_arr = np.empty((n, 28 + 4 * h), dtype=np.float64)
    cdef double[:, ::1] out = out_arr
    cdef double sums[4]
    cdef double changes[2]
    cdef double z[4]
    cdef double count
    cdef Py_ssize_t first
    for i in range(n):
        depth = depths[i]
        for f in range(5):  # sp
            out[i, f] = head[i, f]
        if type(depth) is tuple and len(<tuple> depth) == 2:
            out[i, 5] = <double> (<tuple> depth)[0]
            out[i, 6] = <double> (<tuple> depth)[1]
        else:
            out[i, 5] = float(depth[0])
            out[i, 6] = float(depth[1])
        for f in range(4):  # sn
            out[i, 7 + f] = head[i, 10 + f]
        for f in range(5):  # sp_previous
            out[i, 11 + f] = head[i, 5 + f]
        for f in range(4):
            for j in range(h):
                out[i, 16 + f * h + j] = lags[i, j, f]
            sums[f] = 0.0
        changes[0] = 0.0
        changes[1] = 0.0
        first = h
        for j in range(h):
            if isnan(lags[i, j, 0]):
                z[0] = z[1] = z[2] = z[3] = 0.0
            else:
                for f in range(4):
                    z[f] = lags[i, j, f]
            for f in range(4):
                sums[f] = sums[f] + z[f]
            changes[0] = changes[0] + (1.0 if z[0] != 0 else 0.0)
            changes[1] = changes[1] + (1.0 if z[1] != 0 else 0.0)
            if first == h and (z[0] != 0 or z[1] != 0):
                first = j
        col = 16 + 4 * h
        count = <double> lengths[i]
        out[i, col] = count
        out[i, col + 1] = head[i, 14]
        out[i, col + 2] = head[i, 15]
        if lengths[i] == 0:
            for f in range(3, 12):
                out[i, col + f] = NAN
            continue
        out[i, col + 3] = sums[0] / count
        out[i, col + 4] = sums[1] / count
        out[i, col + 5] = changes[0] / count
        out[i, col + 6] = changes[1] / count
        out[i, col + 7] = sums[2] / count
        out[i, col + 8] = sums[3] / count
        out[i, col + 9] = sums[0] / sums[3] if sums[3] > 0 else NAN
        out[i, col + 10] = sums[1] / sums[3] if sums[3] > 0 else NAN
        out[i, col + 11] = <double> min(first, lengths[i])
    return out_arr


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


def top_k_rows(const float[:, ::1] scores, Py_ssize_t k):
    """Each row's ``k`` largest scores and their columns, best first; ties to the lower
    column, and rows shorter than ``k`` padded with ``-inf`` and column ``-1``. What FAISS's
    flat inner-product search returns from the same products: one pass over a row keeps its
    best ``k`` in order, so past the first few columns a column costs one comparison (FAISS's
    heap selection cost as much as the products themselves at 1,024 to 4,096 centroids).

    >>> import numpy as np
    >>> s = np.array([[0.1, 0.9, 0.5, 0.9], [3.0, -1.0, 2.0, 0.0]], dtype=np.float32)
    >>> sims, cols = top_k_rows(s, 3)
    >>> sims.tolist(), cols.tolist()
    ([[0.8999999761581421, 0.8999999761581421, 0.5], [3.0, 2.0, 0.0]], [[1, 3, 2], [0, 2, 3]])
    >>> top_k_rows(s[:1, :1], 2)[1].tolist()
    [[0, -1]]
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    cdef Py_ssize_t n = scores.shape[0], width = scores.shape[1], i
    sims_arr = np.full((n, k), -np.inf, dtype=np.float32)
    cols_arr = np.full((n, k), -1, dtype=np.int64)
    cdef float[:, ::1] sims = sims_arr
    cdef int64_t[:, ::1] cols = cols_arr
    if k and width:
        with nogil:
            for i in range(n):
                _top_k_row(&scores[i, 0], width, k, &sims[i, 0], &cols[i, 0])
    return sims_arr, cols_arr


cdef enum:
    _SCREEN = 16  # columns screened against the k-th best at once (one vectorised compare)


cdef inline void _top_k_row(
    const float* row, Py_ssize_t width, Py_ssize_t k, float* best, int64_t* at
) noexcept nogil:
    """``row``'s best ``k`` into ``best`` and ``at`` (sorted, best first) by insertion: a
    column enters only if it beats the k-th best so far (strictly, so ties keep the lower
    column ahead). Past the first ``k`` columns, runs of `_SCREEN` columns are first
    counted against the k-th best in one vectorisable loop, and most runs have none to
    insert."""
    cdef Py_ssize_t i = 0, j
    cdef int s, hits  # 32-bit, as wide as a float compare's mask: the count vectorises
    cdef float kth
    while i < width and i < k:
        _insert(best, at, i, i, row[i])
        i += 1
    kth = best[k - 1]
    while i + _SCREEN <= width:
        hits = 0
        for s in range(_SCREEN):
            hits += row[i + s] > kth
        if hits:
            for j in range(i, i + _SCREEN):
                if row[j] > best[k - 1]:
                    _insert(best, at, k - 1, j, row[j])
            kth = best[k - 1]
        i += _SCREEN
    while i < width:
        if row[i] > best[k - 1]:
            _insert(best, at, k - 1, i, row[i])
        i += 1


cdef inline void _insert(
    float* best, int64_t* at, Py_ssize_t j, Py_ssize_t column, float x
) noexcept nogil:
    """Put ``x`` (of ``column``) at slot ``j`` or above it, past the slots it beats."""
    while j > 0 and best[j - 1] < x:
        best[j] = best[j - 1]
        at[j] = at[j - 1]
        j -= 1
    best[j] = x
    at[j] = column


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


def gathered_dots(
    const float[:, ::1] vectors,
    const int64_t[:, ::1] rows,
    const float[:, ::1] queries,
    float[:, ::1] out,
    Py_ssize_t column=0,
):
    """``out[i, column + j] = vectors[rows[i, j]] . queries[i]``, ``-inf`` where
    ``rows[i, j] < 0`` (no candidate): the exact similarities of each query to its
    candidates, without first gathering the candidates' vectors into an array of their own.

    A product is summed in one fixed order (eight running sums over the dimensions, then
    added up in turn), so a pair of vectors gets the same similarity whatever batch, row or
    column it comes in, as BLAS kernels chosen by shape do not promise.

    >>> import numpy as np
    >>> v = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    >>> q = np.array([[0.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    >>> out = np.zeros((2, 3), dtype=np.float32)
    >>> gathered_dots(v, np.array([[1, -1], [0, 1]]), q, out, 1)
    >>> out.tolist()
    [[0.0, 0.800000011920929, -inf], [0.0, 1.0, 0.6000000238418579]]
    """
    cdef Py_ssize_t n = rows.shape[0], width = rows.shape[1], dim = vectors.shape[1]
    cdef Py_ssize_t count = vectors.shape[0], i, j, row
    if queries.shape[0] != n or queries.shape[1] != dim:
        raise ValueError(f"queries of shape {tuple(queries.shape)[:2]}, expected ({n}, {dim})")
    if out.shape[0] != n or column < 0 or column + width > out.shape[1]:
        raise ValueError(f"out of shape {tuple(out.shape)[:2]} cannot take {width} columns at {column}")
    for i in range(n):
        for j in range(width):
            if rows[i, j] >= count:
                raise IndexError(f"row {rows[i, j]} outside 0..{count - 1}")
    with nogil:
        for i in range(n):
            for j in range(width):
                row = rows[i, j]
                if row < 0:
                    out[i, column + j] = -INFINITY
                else:
                    out[i, column + j] = _dot(&vectors[row, 0], &queries[i, 0], dim)


cdef inline float _dot(const float* a, const float* b, Py_ssize_t dim) noexcept nogil:
    """``a . b`` summed in a fixed order: eight running sums, each over every eighth
    dimension, added up in turn, then the dimensions past the last full eight."""
    cdef float s[8]
    cdef Py_ssize_t i, t, full = dim - dim % 8
    cdef float total
    for t in range(8):
        s[t] = 0.0
    i = 0
    while i < full:
        for t in range(8):
            s[t] += a[i + t] * b[i + t]
        i += 8
    total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
    while i < dim:
        total += a[i] * b[i]
        i += 1
    return total


# -- compact codes: varints and Rice codes ------------------------------------------------------
#
# The page state's version 3 (`online.history.to_bytes`) and the related pages' descending
# weight codes (`online.stores.Neighbours`) are written and read here: per event, a few dozen
# values each, where a Python or numpy loop cost several times the rest of the encoding.

from libc.math cimport floor, isinf, llround, rint, signbit, sqrt
from libc.stdint cimport uint64_t
from libc.string cimport memcpy, memset

from online._le cimport store_u32le


class TruncatedError(ValueError):
    """A blob that ends before what its own head says it holds (or runs on after it)."""


cdef inline Py_ssize_t _put_varint(uint8_t* p, Py_ssize_t at, uint64_t v) noexcept nogil:
    while v >= 0x80:
        p[at] = <uint8_t> ((v & 0x7F) | 0x80)
        v >>= 7
        at += 1
    p[at] = <uint8_t> v
    return at + 1


cdef inline Py_ssize_t _get_varint(
    const uint8_t* p, Py_ssize_t size, Py_ssize_t at, uint64_t* out
) noexcept nogil:
    """The varint at ``at``, into ``out``; the offset after it, or -1 past the end (or a
    varint longer than 64 bits)."""
    cdef uint64_t v = 0, b
    cdef int shift = 0
    while True:
        if at >= size or shift > 63:
            return -1
        b = p[at]
        at += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            out[0] = v
            return at
        shift += 7


cdef uint64_t _U32_MAX = 4294967295u


cdef inline uint64_t _rice_bits(const uint32_t* gaps, Py_ssize_t n, int k) noexcept nogil:
    cdef uint64_t bits = <uint64_t> n * (k + 1)
    cdef Py_ssize_t i
    for i in range(n):
        bits += gaps[i] >> k
    return bits


cdef int _rice_parameter(const uint32_t* gaps, Py_ssize_t n, uint64_t total, int most) noexcept nogil:
    """The Rice parameter in 0..``most`` that codes ``gaps`` in the fewest bits, among those
    next to log2 of their mean (``total`` / n), the optimum for geometric gaps."""
    cdef int k0 = 0, k, best = 0
    cdef uint64_t mean = total // <uint64_t> n if n else 0, bits, best_bits = 0
    while k0 < most and (mean >> (k0 + 1)):
        k0 += 1
    for k in range(k0 - 1 if k0 > 0 else 0, k0 + 2 if k0 + 1 <= most else most + 1):
        bits = _rice_bits(gaps, n, k)
        if best_bits == 0 or bits < best_bits:
            best, best_bits = k, bits
    return best


cdef void _rice_put(uint8_t* out, const uint32_t* gaps, Py_ssize_t n, int k) noexcept nogil:
    """``gaps`` Rice-coded with parameter ``k`` into ``out`` (zeroed, `_rice_bits` long),
    least significant bit first: each gap's quotient by 2**k as that many 0 bits and a 1,
    then its low ``k`` bits."""
    cdef uint64_t pos = 0, v
    cdef Py_ssize_t i, at
    for i in range(n):
        pos += gaps[i] >> k
        out[pos >> 3] |= <uint8_t> (1 << (pos & 7))
        pos += 1
        if k:
            v = (<uint64_t> (gaps[i] & ((<uint32_t> 1 << k) - 1))) << (pos & 7)
            at = pos >> 3
            while v:
                out[at] |= <uint8_t> (v & 0xFF)
                v >>= 8
                at += 1
            pos += k


cdef Py_ssize_t _rice_get(
    const uint8_t* data, Py_ssize_t size, Py_ssize_t n, int k, uint32_t* gaps
) noexcept nogil:
    """`_rice_put`'s inverse: ``n`` gaps from ``data`` (``size`` bytes); the bytes read, or -1
    when they run past ``size`` (or a gap past 32 bits)."""
    cdef uint64_t pos = 0, end = <uint64_t> size * 8, q, v
    cdef Py_ssize_t i, j, at
    cdef uint8_t byte
    for i in range(n):
        q = 0
        while True:
            if pos >= end:
                return -1
            byte = data[pos >> 3] >> (pos & 7)
            if byte:
                while not (byte & 1):
                    byte >>= 1
                    q += 1
                    pos += 1
                pos += 1
                break
            q += 8 - (pos & 7)
            pos += 8 - (pos & 7)
        if pos + k > end or q > (_U32_MAX >> k):
            return -1
        v = 0
        if k:
            at = pos >> 3
            for j in range(((pos & 7) + k + 7) >> 3):
                v |= (<uint64_t> data[at + j]) << (8 * j)
            v = (v >> (pos & 7)) & (((<uint64_t> 1) << k) - 1)
            pos += k
        v |= q << k
        gaps[i] = <uint32_t> v
    return <Py_ssize_t> ((pos + 7) >> 3)


cdef Py_ssize_t _plan_descending(
    const uint8_t* codes, Py_ssize_t n, uint32_t* drops, int* k
) noexcept nogil:
    """The size of `pack_descending`'s coding of ``codes`` (their drops into ``drops``, 256
    long, the Rice parameter into ``k``); 0 where it gives None."""
    cdef Py_ssize_t i, size
    if n == 0 or n > 257:
        return 0
    for i in range(1, n):
        if codes[i] > codes[i - 1]:
            return 0
        drops[i - 1] = codes[i - 1] - codes[i]
    k[0] = _rice_parameter(drops, n - 1, codes[0] - codes[n - 1], 7)
    size = 2 + <Py_ssize_t> ((_rice_bits(drops, n - 1, k[0]) + 7) >> 3)
    return 0 if size >= n else size


cdef void _put_descending(
    uint8_t* p, const uint8_t* codes, Py_ssize_t n, const uint32_t* drops, int k, Py_ssize_t size
) noexcept nogil:
    memset(p, 0, size)
    p[0] = codes[0]
    p[1] = <uint8_t> k
    _rice_put(p + 2, drops, n - 1, k)


def pack_descending(const uint8_t[::1] codes):
    """Byte codes that never rise (a related-page list's weights, largest first), coded: the
    first, the Rice parameter, then each drop Rice-coded (a few bits each where a byte each
    was kept); None when the codes rise somewhere or the coding is no shorter.

    >>> codes = bytes([255, 250, 250, 249, 247, 240, 239, 235, 230, 228, 220, 210])
    >>> pack_descending(codes).hex(), pack_descending(bytes([1, 2]))
    ('ff0296d527564201', None)
    """
    cdef Py_ssize_t n = codes.shape[0]
    cdef uint32_t[256] drops
    cdef int k
    cdef Py_ssize_t size = _plan_descending(&codes[0] if n else NULL, n, drops, &k)
    if size == 0:
        return None
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    _put_descending(<uint8_t*> PyBytes_AS_STRING(out), &codes[0], n, drops, k, size)
    return out


cdef Py_ssize_t _read_descending(
    const uint8_t* data, Py_ssize_t size, Py_ssize_t offset, Py_ssize_t n, uint8_t* out
) except -1:
    """`pack_descending`'s codes at ``offset`` of ``data`` (``size`` bytes) into ``out`` (``n``
    long, at most 257); the offset after them. Raises ValueError where they run past the
    end or below 0."""
    cdef uint32_t[256] drops
    cdef Py_ssize_t used, i
    if n < 1 or n > 257 or offset < 0 or offset + 2 > size or data[offset + 1] > 7:
        raise TruncatedError("truncated or damaged weight codes")
    used = _rice_get(data + offset + 2, size - offset - 2, n - 1, data[offset + 1], drops)
    if used < 0:
        raise TruncatedError("truncated weight codes")
    cdef int64_t code = data[offset]
    out[0] = <uint8_t> code
    for i in range(1, n):
        code -= drops[i - 1]
        if code < 0:
            raise TruncatedError("damaged weight codes")
        out[i] = <uint8_t> code
    return offset + 2 + used


# -- page state, version 3 ------------------------------------------------------------------------

# flags (the second byte), as `online.history` names them; 4 was version 2's and is not used
cdef int _S_HAS_OK = 1, _S_OK_AT_LAST = 2, _S_TIME32 = 8, _S_RICE_FPS = 16
# the common counts (status 200, no errors, an interval for every fetch after the first):
# the fetch count alone is written; the intervals' seconds packed (`StateCodec`)
cdef int _S_PLAIN = 32, _S_PACKED_DAYS = 64
cdef int _S_KNOWN = 1 | 2 | 8 | 16 | 32 | 64
# a float field's kind (two bits a field): canonical NaN, small non-negative integer,
# float32 as it is, a multiple of 1/10,000 (four decimals); a previous static-page value may
# also be the current one's (nothing stored): their five kinds are a base-5 number
cdef int _K_NAN = 0, _K_INT = 1, _K_RAW = 2, _K_DECIMAL = 3, _K_SAME = 4
cdef uint32_t _CANONICAL_NAN = 0x7FC00000
cdef uint64_t _SMALL = 1 << 21  # varints of 3 bytes at most
cdef double _DECIMAL = 10000.0
# an interval's head byte: content changed (top bit), then new internal 0..15 and new
# external 0..6 as ``internal | external << 4``, or 127: both follow as varints
cdef int _HEAD_EXTERNAL = 7, _HEAD_INTERNAL = 16, _HEAD_WIDE = 127
# the most intervals whose seconds are packed, and the most seconds an interval is read with
cdef enum:
    _PACK_MOST = 64
cdef uint64_t _MOST_SECONDS = (<uint64_t> 1) << 41


cdef inline uint32_t _f32_bits(float f) noexcept nogil:
    cdef uint32_t bits
    memcpy(&bits, &f, 4)
    return bits


cdef inline float _bits_f32(uint32_t bits) noexcept nogil:
    cdef float f
    memcpy(&f, &bits, 4)
    return f


cdef inline float _to_f32(double x) except? -1.0:
    """``x`` as struct's ``f`` packs it (OverflowError past float32's range)."""
    cdef float f = <float> x
    if isinf(f) and not isinf(x):
        raise OverflowError("float too large to pack with f format")
    return f


cdef inline int _float_kind(float f, uint64_t* payload) noexcept nogil:
    cdef uint32_t bits = _f32_bits(f)
    cdef long long m
    if bits == _CANONICAL_NAN:
        return _K_NAN
    if isnan(f) or isinf(f):
        payload[0] = bits
        return _K_RAW
    if f >= 0 and not signbit(f) and f < _SMALL and floor(f) == f:
        payload[0] = <uint64_t> f
        return _K_INT
    if f > 0 and f < _SMALL / _DECIMAL:
        m = llround(<double> f * _DECIMAL)
        if m >= 0 and _f32_bits(<float> (<double> m / _DECIMAL)) == bits:
            payload[0] = <uint64_t> m
            return _K_DECIMAL
    payload[0] = bits
    return _K_RAW


cdef inline int _interval_seconds(float days, uint64_t* seconds) noexcept nogil:
    """Whether ``days`` is a whole number of seconds (1 or more) as the history update makes
    it (``float32(seconds / 86400)``), that number into ``seconds``."""
    cdef long long s
    if not (days > 0 and days < 1e7):
        return 0
    s = llround(<double> days * SECONDS_PER_DAY)
    if s < 1 or _f32_bits(<float> (<double> s / SECONDS_PER_DAY)) != _f32_bits(days):
        return 0
    seconds[0] = <uint64_t> s
    return 1


cdef extern from *:
    """
    /* A tuple subclass's instance holding ``items``' (an exact tuple) values, made as
       tuple.__new__(type, items) makes it, without the call through __new__. */
    static PyObject* lookaround_subtuple(PyObject* type, PyObject* items) {
        Py_ssize_t i, n = PyTuple_GET_SIZE(items);
        PyObject* made = ((PyTypeObject*) type)->tp_alloc((PyTypeObject*) type, n);
        if (made == NULL) return NULL;
        for (i = 0; i < n; i++) {
            PyObject* item = PyTuple_GET_ITEM(items, i);
            Py_INCREF(item);
            PyTuple_SET_ITEM(made, i, item);
        }
        return made;
    }
    """
    object _subtuple "lookaround_subtuple"(object type, tuple items)


cdef inline Py_ssize_t _varint_size(uint64_t v) noexcept nogil:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline Py_ssize_t _put_head(uint8_t* p, Py_ssize_t at, tuple iv) except -1:
    """An interval's (a 4-tuple's) new link counts and content change: one byte where the
    counts are small, else a byte and two varints."""
    cdef uint64_t internal = <uint64_t> iv[0], external = <uint64_t> iv[1]
    cdef uint8_t changed = 0x80 if iv[2] else 0
    if internal < <uint64_t> _HEAD_INTERNAL and external < <uint64_t> _HEAD_EXTERNAL:
        p[at] = changed | <uint8_t> (internal | (external << 4))
        return at + 1
    p[at] = changed | _HEAD_WIDE
    at = _put_varint(p, at + 1, internal)
    return _put_varint(p, at, external)


cdef class StateCodec:
    """`online.history.to_bytes` / `from_bytes` for format version 3, compiled: built once
    with the history module's record types and its NaN (a canonical NaN reads back as that
    very object, as the state's defaults hold it).

    Layout: version (3), flags, the last fetch's time (uint32 where it is a whole second in
    range, flag 8, else float64: the Redis write script reads it to keep the newest state),
    ``last_ok_at`` (float64, only where it is not the last fetch's time), varints of the
    counts: the fetches alone where the status is 200, there are no errors and the intervals
    are one fewer than the fetches (flag 32), else the status XOR 200, the fetches, errors
    and intervals; the content and embedding fingerprints (uint32 each), the 14 float fields'
    kinds (uint32: the current static-page and the network values' 2 bits each, then the
    previous static-page values' as a base-5 number, kind 4 being "the current value") and
    their values (none for a NaN or a repeated value, a varint for a small whole number or a
    multiple of 1/10,000, else float32); a varint count of intervals, then either (flag 64:
    2 to 64 intervals, all whole seconds) the first one's seconds as a varint, a byte of Rice
    parameter and the zigzag differences of each next one's seconds from the one before,
    Rice-coded, then each interval's head; or each interval's days (a varint of its seconds,
    or 0 and float32 days) and head. An interval's head is a byte: whether the content
    changed (top bit) and its new internal (0..15) and external (0..6) link counts as
    ``internal + 16 * external``, or 127 and the two counts as varints. Last, a varint count
    of kept fingerprints and their top 24 bits: sorted, as Rice-coded gaps after a byte of
    the parameter (about 20 bits a link for 40 links), else 3 bytes each.
    """

    cdef object PageState, Interval, nan

    def __init__(self, PageState, Interval, object nan):
        if len(PageState._fields) != 13 or len(Interval._fields) != 4:
            raise TypeError("PageState's fields are not the ones this codec was written for")
        if not (issubclass(PageState, tuple) and issubclass(Interval, tuple)):
            raise TypeError("PageState and Interval must be tuple types")  # `_subtuple`
        self.PageState = PageState
        self.Interval = Interval
        self.nan = nan

    def encode(self, object page_state):
        if not isinstance(page_state, tuple) or len(page_state) != 13:
            raise TypeError(f"expected a PageState, got {type(page_state).__name__}")
        cdef tuple state = <tuple> page_state
        cdef double t = state[0], ok_at
        cdef object last_ok = state[1]
        cdef bytes fps = <bytes?> state[8]
        cdef tuple window = <tuple?> state[9]
        cdef tuple sp = <tuple?> state[10], previous = <tuple?> state[11], sn = <tuple?> state[12]
        cdef Py_ssize_t n_window = len(window), n_fps = len(fps) // 4, i, at
        cdef Py_ssize_t rice_bytes = 0, day_rice = 0, plain_days = 0
        cdef int flags = 0, k = 0, k_days = 0, kind
        cdef int fkinds[14]
        cdef uint32_t kinds = 0, previous_kinds = 0, v, prev = 0
        cdef uint64_t payloads[14]
        cdef uint32_t fbits[14]
        cdef float f
        cdef const uint8_t* fp = <const uint8_t*> PyBytes_AS_STRING(fps)
        cdef uint32_t gap_stack[64]
        cdef uint32_t* gaps = gap_stack
        cdef object gap_buffer = None
        cdef bint sorted_fps = True
        cdef object iv
        cdef uint64_t seconds, status = state[2], fetches = state[3], errors = state[4]
        cdef uint64_t intervals = state[5], zigzag, day_total = 0
        cdef uint64_t secs[_PACK_MOST]
        cdef uint32_t day_gaps[_PACK_MOST]
        cdef int64_t delta
        if len(sp) != 5 or len(previous) != 5 or len(sn) != 4:
            raise ValueError("a page state's static values are 5, 5 and 4")
        # read as tuples, not through the sequence protocol (slow on a tuple subclass)
        for iv in window:
            if not isinstance(iv, tuple) or len(<tuple> iv) != 4:
                raise TypeError("a page state's intervals are 4-tuples")
        if t == floor(t) and t >= 0 and not signbit(t) and t < 4294967296.0:
            flags |= _S_TIME32
        if last_ok is not None:
            flags |= _S_HAS_OK
            ok_at = last_ok
            if ok_at == t:
                flags |= _S_OK_AT_LAST
        if status == 200 and errors == 0 and fetches >= 1 and intervals == fetches - 1:
            flags |= _S_PLAIN
        for i in range(14):
            f = _to_f32(sp[i] if i < 5 else previous[i - 5] if i < 10 else sn[i - 10])
            fbits[i] = _f32_bits(f)
            kind = _float_kind(f, &payloads[i])
            if 5 <= i < 10 and kind != _K_NAN and fbits[i] == fbits[i - 5]:
                kind = _K_SAME
            fkinds[i] = kind
        for i in range(5):
            kinds |= (<uint32_t> fkinds[i]) << (2 * i)
            previous_kinds = previous_kinds * 5 + <uint32_t> fkinds[9 - i]
        for i in range(4):
            kinds |= (<uint32_t> fkinds[10 + i]) << (10 + 2 * i)
        kinds |= previous_kinds << 18
        # the intervals' seconds packed: where there are 2 to 64, all whole seconds, each
        # within 2**31 of the one before, and that is shorter than a varint each
        if 2 <= n_window <= _PACK_MOST:
            for i in range(n_window):
                if not _interval_seconds(_to_f32((<tuple> window[i])[3]), &secs[i]):
                    break
                plain_days += _varint_size(secs[i])
                if i:
                    delta = <int64_t> secs[i] - <int64_t> secs[i - 1]
                    zigzag = (<uint64_t> delta << 1) ^ <uint64_t> (delta >> 63)
                    if zigzag > _U32_MAX:
                        break
                    day_gaps[i - 1] = <uint32_t> zigzag
                    day_total += zigzag
            else:
                k_days = _rice_parameter(day_gaps, n_window - 1, day_total, 31)
                day_rice = <Py_ssize_t> ((_rice_bits(day_gaps, n_window - 1, k_days) + 7) >> 3)
                if _varint_size(secs[0]) + 1 + day_rice < plain_days:
                    flags |= _S_PACKED_DAYS
        if n_fps > 64:
            gap_buffer = np.empty(n_fps, dtype=np.uint32)
            gaps = <uint32_t*> <size_t> gap_buffer.ctypes.data
        for i in range(n_fps):
            v = load_u32le(fp + 4 * i) >> 8
            if v < prev:
                sorted_fps = False
                break
            gaps[i] = v - prev
            prev = v
        if sorted_fps and n_fps:
            k = _rice_parameter(gaps, n_fps, prev, 24)
            rice_bytes = 1 + <Py_ssize_t> ((_rice_bits(gaps, n_fps, k) + 7) >> 3)
            if rice_bytes < 3 * n_fps:
                flags |= _S_RICE_FPS
        # the most it can take: 2 + 8 + 8 + 4 varints + 8 + 4 + 14 floats + intervals + fps
        cdef Py_ssize_t most = 2 + 8 + 8 + 40 + 8 + 4 + 14 * 10 + 10 + 32 * n_window + 10
        most += rice_bytes if flags & _S_RICE_FPS else 3 * n_fps
        cdef bytes out = PyBytes_FromStringAndSize(NULL, most)
        cdef uint8_t* p = <uint8_t*> PyBytes_AS_STRING(out)
        p[0] = 3
        p[1] = <uint8_t> flags
        if flags & _S_TIME32:
            store_u32le(<uint32_t*> (p + 2), <uint32_t> t)
            at = 6
        else:
            memcpy(p + 2, &t, 8)
            at = 10
        if (flags & _S_HAS_OK) and not (flags & _S_OK_AT_LAST):
            memcpy(p + at, &ok_at, 8)
            at += 8
        if flags & _S_PLAIN:
            at = _put_varint(p, at, fetches)
        else:
            at = _put_varint(p, at, status ^ 200)
            at = _put_varint(p, at, fetches)
            at = _put_varint(p, at, errors)
            at = _put_varint(p, at, intervals)
        store_u32le(<uint32_t*> (p + at), <uint32_t> state[6])
        store_u32le(<uint32_t*> (p + at + 4), <uint32_t> state[7])
        store_u32le(<uint32_t*> (p + at + 8), kinds)
        at += 12
        for i in range(14):
            kind = fkinds[i]
            if kind == _K_RAW:
                store_u32le(<uint32_t*> (p + at), <uint32_t> payloads[i])
                at += 4
            elif kind == _K_INT or kind == _K_DECIMAL:
                at = _put_varint(p, at, payloads[i])
        at = _put_varint(p, at, <uint64_t> n_window)
        if flags & _S_PACKED_DAYS:
            at = _put_varint(p, at, secs[0])
            p[at] = <uint8_t> k_days
            memset(p + at + 1, 0, day_rice)
            _rice_put(p + at + 1, day_gaps, n_window - 1, k_days)
            at += 1 + day_rice
            for iv in window:
                at = _put_head(p, at, <tuple> iv)
        else:
            for iv in window:
                f = _to_f32((<tuple> iv)[3])
                if _interval_seconds(f, &seconds):
                    at = _put_varint(p, at, seconds)
                else:
                    p[at] = 0
                    store_u32le(<uint32_t*> (p + at + 1), _f32_bits(f))
                    at += 5
                at = _put_head(p, at, <tuple> iv)
        at = _put_varint(p, at, <uint64_t> n_fps)
        if flags & _S_RICE_FPS:
            p[at] = <uint8_t> k
            memset(p + at + 1, 0, rice_bytes - 1)
            _rice_put(p + at + 1, gaps, n_fps, k)
            at += rice_bytes
        else:
            for i in range(n_fps):
                p[at] = fp[4 * i + 1]
                p[at + 1] = fp[4 * i + 2]
                p[at + 2] = fp[4 * i + 3]
                at += 3
        if at > most:  # cannot happen: the bound above is generous
            raise AssertionError("page state longer than its bound")
        return out[:at]

    def decode(self, bytes data):
        """A state from its version 3 bytes; raises ValueError (`TruncatedError`) where they
        end early or run on."""
        cdef const uint8_t* p = <const uint8_t*> PyBytes_AS_STRING(data)
        cdef Py_ssize_t size = len(data), at, i, n_window, n_fps, used
        cdef int flags, kind
        cdef double t, ok_at
        cdef uint32_t kinds, previous_kinds, v
        cdef uint64_t x, internal, external, seconds
        cdef object last_ok = None
        cdef list counts = [200, 0, 0, 0]
        cdef list floats = [None] * 14
        cdef uint32_t gap_stack[64]
        cdef uint32_t* gaps = gap_stack
        cdef object gap_buffer = None
        cdef uint64_t secs[_PACK_MOST]
        cdef uint32_t day_gaps[_PACK_MOST]
        cdef int64_t delta
        cdef float days
        cdef uint8_t head
        if size < 2 or p[0] != 3:
            raise ValueError("not a version 3 page state")
        flags = p[1]
        if flags & ~_S_KNOWN:
            raise ValueError("damaged page state (unknown flags)")
        if flags & _S_TIME32:
            if size < 6:
                raise TruncatedError("truncated page state")
            t = <double> load_u32le(p + 2)
            at = 6
        else:
            if size < 10:
                raise TruncatedError("truncated page state")
            memcpy(&t, p + 2, 8)
            at = 10
        if flags & _S_HAS_OK:
            if flags & _S_OK_AT_LAST:
                ok_at = t
            else:
                if at + 8 > size:
                    raise TruncatedError("truncated page state")
                memcpy(&ok_at, p + at, 8)
                at += 8
            last_ok = ok_at
        if flags & _S_PLAIN:
            at = _get_varint(p, size, at, &x)
            if at < 0:
                raise TruncatedError("truncated page state")
            if x == 0:
                raise ValueError("damaged page state (counts)")
            counts[1] = x
            counts[3] = x - 1
        else:
            for i in range(4):
                at = _get_varint(p, size, at, &x)
                if at < 0:
                    raise TruncatedError("truncated page state")
                counts[i] = x ^ 200 if i == 0 else x
        if at + 12 > size:
            raise TruncatedError("truncated page state")
        content_fp = load_u32le(p + at)
        embedding_fp = load_u32le(p + at + 4)
        kinds = load_u32le(p + at + 8)
        at += 12
        previous_kinds = kinds >> 18
        if previous_kinds >= 3125:
            raise ValueError("damaged page state (float kinds)")
        for i in range(14):
            if i < 5:
                kind = (kinds >> (2 * i)) & 3
            elif i < 10:
                kind = previous_kinds % 5
                previous_kinds //= 5
            else:
                kind = (kinds >> (2 * i - 10)) & 3
            if kind == _K_NAN:
                floats[i] = self.nan
            elif kind == _K_SAME:
                floats[i] = floats[i - 5]
            elif kind == _K_RAW:
                if at + 4 > size:
                    raise TruncatedError("truncated page state")
                floats[i] = <double> _bits_f32(load_u32le(p + at))
                at += 4
            else:
                at = _get_varint(p, size, at, &x)
                if at < 0:
                    raise TruncatedError("truncated page state")
                if kind == _K_INT:
                    floats[i] = <double> <float> x
                else:
                    floats[i] = <double> <float> (<double> x / _DECIMAL)
        at = _get_varint(p, size, at, &x)
        if at < 0 or x > <uint64_t> size:
            raise TruncatedError("truncated page state")
        n_window = <Py_ssize_t> x
        if flags & _S_PACKED_DAYS:
            if n_window < 2 or n_window > _PACK_MOST:
                raise ValueError("damaged page state (intervals)")
            at = _get_varint(p, size, at, &secs[0])
            if at < 0 or at + 1 > size or p[at] > 31:
                raise TruncatedError("truncated page state")
            used = _rice_get(p + at + 1, size - at - 1, n_window - 1, p[at], day_gaps)
            if used < 0:
                raise TruncatedError("truncated page state")
            at += 1 + used
            if secs[0] == 0 or secs[0] > _MOST_SECONDS:
                raise ValueError("damaged page state (intervals)")
            for i in range(1, n_window):  # zigzag: 2d for d >= 0, -2d - 1 for d < 0
                delta = <int64_t> (day_gaps[i - 1] >> 1) ^ -(<int64_t> (day_gaps[i - 1] & 1))
                secs[i] = secs[i - 1] + <uint64_t> delta
                if secs[i] == 0 or secs[i] > _MOST_SECONDS:
                    raise ValueError("damaged page state (intervals)")
        cdef list window = []
        cdef object Interval = self.Interval
        for i in range(n_window):
            if flags & _S_PACKED_DAYS:
                days = <float> (<double> secs[i] / SECONDS_PER_DAY)
            else:
                at = _get_varint(p, size, at, &seconds)
                if at < 0:
                    raise TruncatedError("truncated page state")
                if seconds:
                    if seconds > _MOST_SECONDS:
                        raise ValueError("damaged page state (intervals)")
                    days = <float> (<double> seconds / SECONDS_PER_DAY)
                else:
                    if at + 4 > size:
                        raise TruncatedError("truncated page state")
                    days = _bits_f32(load_u32le(p + at))
                    at += 4
            if at >= size:
                raise TruncatedError("truncated page state")
            head = p[at]
            at += 1
            if (head & 0x7F) == _HEAD_WIDE:
                at = _get_varint(p, size, at, &internal)
                if at < 0:
                    raise TruncatedError("truncated page state")
                at = _get_varint(p, size, at, &external)
                if at < 0:
                    raise TruncatedError("truncated page state")
            elif (head & 0x7F) < _HEAD_INTERNAL * _HEAD_EXTERNAL:
                internal = head & 0x0F
                external = (head >> 4) & 0x07
            else:
                raise ValueError("damaged page state (intervals)")
            window.append(
                _subtuple(Interval, (internal, external, (head & 0x80) != 0, <double> days))
            )
        at = _get_varint(p, size, at, &x)
        if at < 0 or x > <uint64_t> size * 8:
            raise TruncatedError("truncated page state")
        n_fps = <Py_ssize_t> x
        cdef bytes fps = PyBytes_FromStringAndSize(NULL, 4 * n_fps)
        cdef uint8_t* o = <uint8_t*> PyBytes_AS_STRING(fps)
        if flags & _S_RICE_FPS:
            if n_fps > 64:
                gap_buffer = np.empty(n_fps, dtype=np.uint32)
                gaps = <uint32_t*> <size_t> gap_buffer.ctypes.data
            if at + 1 > size or p[at] > 24:
                raise TruncatedError("truncated page state")
            used = _rice_get(p + at + 1, size - at - 1, n_fps, p[at], gaps)
            if used < 0:
                raise TruncatedError("truncated page state")
            at += 1 + used
            v = 0
            for i in range(n_fps):
                v += gaps[i]
                if v > 0xFFFFFF:
                    raise TruncatedError("damaged page state (fingerprints)")
                store_u32le(<uint32_t*> (o + 4 * i), v << 8)
        else:
            if at + 3 * n_fps > size:
                raise TruncatedError("truncated page state")
            for i in range(n_fps):
                o[4 * i] = 0
                o[4 * i + 1] = p[at]
                o[4 * i + 2] = p[at + 1]
                o[4 * i + 3] = p[at + 2]
                at += 3
        if at != size:
            raise TruncatedError("damaged page state (bytes after its end)")
        return _subtuple(
            self.PageState,
            (
                t,
                last_ok,
                counts[0],
                counts[1],
                counts[2],
                counts[3],
                content_fp,
                embedding_fp,
                fps,
                tuple(window),
                tuple(floats[:5]),
                tuple(floats[5:10]),
                tuple(floats[10:]),
            ),
        )


def pack_varints(tuple values):
    """Non-negative integers as LEB128 varints (7 bits a byte, least significant first).

    >>> pack_varints((0, 127, 128, 20000)).hex()
    '007f8001a09c01'
    """
    cdef uint8_t[160] buf
    cdef Py_ssize_t at = 0, i, n = len(values)
    if n > 16:
        raise ValueError("at most 16 varints at a time")
    for i in range(n):
        at = _put_varint(buf, at, <uint64_t> values[i])
    return PyBytes_FromStringAndSize(<char*> buf, at)


# -- related-page lists ---------------------------------------------------------------------------

# `online.stores.Neighbours`' flags (the second byte of versions 3 and 4)
cdef int _N_HALF_WEIGHTS = 1, _N_NIBBLES = 2, _N_BYTE_WEIGHTS = 8, _N_SHORT_IDS = 16
cdef int _N_DESCENDING = 32, _N_COS_MANTISSA = 64
# `online.stores.ID_PREFIX_SHIFT` and the bytes a short id keeps
cdef int _N_PREFIX_SHIFT = 23, _N_PREFIX_BYTES = 5
cdef float _N_WEIGHT_STEPS = 255.0


cdef inline void _need(Py_ssize_t at, Py_ssize_t more, Py_ssize_t size) except *:
    if more < 0 or at + more > size:
        raise TruncatedError("truncated neighbours record")


def decode_neighbours(const uint8_t[::1] data):
    """A related-page list stored as `online.stores.Neighbours` version 3 or 4: (ids as
    int64, weights as float32, the index size, the direction's int8 codes, ``found_cos``,
    whether the ids are short), the fields `Neighbours` is made of; raises ValueError where
    the record ends early or is damaged, or is of another version. Reads what the numpy
    decoding read, bit for bit: byte-grid weights are ``top`` x (code / 255) in float32, as
    `online.stores.byte_grid_values` computes them."""
    cdef Py_ssize_t size = data.shape[0], at, i, j
    cdef uint64_t counts[3]
    cdef uint64_t prefix
    cdef uint8_t byte_codes[257]
    cdef int flags, nibble
    cdef float top
    if size < 2 or data[0] not in (3, 4):
        raise ValueError("unknown neighbours format")
    cdef const uint8_t* p = &data[0]
    flags = p[1]
    if p[0] == 3:
        _need(0, 10, size)
        counts[0] = load_u32le(p + 2)
        counts[1] = p[6] | (<uint64_t> p[7] << 8)
        counts[2] = p[8] | (<uint64_t> p[9] << 8)
        at = 10
    else:
        at = 2
        for i in range(3):
            at = _get_varint(p, size, at, &counts[i])
            if at < 0:
                raise TruncatedError("truncated neighbours record")
    if counts[1] > <uint64_t> size or counts[2] > 2 * <uint64_t> size:
        raise TruncatedError("truncated neighbours record")
    cdef Py_ssize_t n = <Py_ssize_t> counts[1], dim = <Py_ssize_t> counts[2]
    ids = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] id_view = ids
    if flags & _N_SHORT_IDS:
        _need(at, _N_PREFIX_BYTES * n, size)
        for i in range(n):
            prefix = 0
            for j in range(_N_PREFIX_BYTES):
                prefix |= (<uint64_t> p[at + j]) << (8 * j)
            id_view[i] = <int64_t> (prefix << _N_PREFIX_SHIFT)
            at += _N_PREFIX_BYTES
    else:
        _need(at, 8 * n, size)
        for i in range(n):
            prefix = load_u32le(p + at) | (<uint64_t> load_u32le(p + at + 4) << 32)
            id_view[i] = <int64_t> prefix
            at += 8
    weights = np.empty(n, dtype=np.float32)
    cdef float[::1] w = weights
    if flags & _N_BYTE_WEIGHTS:
        _need(at, 4, size)
        top = _bits_f32(load_u32le(p + at))
        at += 4
        if flags & _N_DESCENDING:
            at = _read_descending(p, size, at, n, byte_codes)
            for i in range(n):
                w[i] = top * (<float> byte_codes[i] / _N_WEIGHT_STEPS)
        else:
            _need(at, n, size)
            for i in range(n):
                w[i] = top * (<float> p[at + i] / _N_WEIGHT_STEPS)
            at += n
    elif flags & _N_HALF_WEIGHTS:
        _need(at, 2 * n, size)
        weights = np.frombuffer(bytes(data[at : at + 2 * n]), dtype="<f2").astype(np.float32)
        at += 2 * n
    else:
        _need(at, 4 * n, size)
        for i in range(n):
            w[i] = _bits_f32(load_u32le(p + at + 4 * i))
        at += 4 * n
    cdef float found_cos
    if flags & _N_COS_MANTISSA:
        _need(at, 3, size)
        found_cos = _bits_f32(
            p[at] | (<uint32_t> p[at + 1] << 8) | (<uint32_t> p[at + 2] << 16) | 0x3F000000u
        )
        at += 3
    else:
        _need(at, 4, size)
        found_cos = _bits_f32(load_u32le(p + at))
        at += 4
    codes = np.empty(dim, dtype=np.int8)
    cdef int8_t[::1] c = codes
    if flags & _N_NIBBLES:
        _need(at, (dim + 1) // 2, size)
        for i in range(dim):
            nibble = (p[at + i // 2] >> (4 * (i & 1))) & 0x0F
            c[i] = <int8_t> (nibble - 16 if nibble & 0x08 else nibble)
    else:
        _need(at, dim, size)
        for i in range(dim):
            c[i] = <int8_t> p[at + i]
    return ids, weights, counts[0], codes, <double> found_cos, bool(flags & _N_SHORT_IDS)


cdef int _N_DIRECTION = 4
cdef uint32_t _F32_BEYOND_HALF = 0x477FE000u  # 65,504, half precision's largest finite value


cdef inline bint _half_exact(float x, uint16_t* half) noexcept nogil:
    """Whether ``x`` is a half-precision value (numpy's float16 of it converts back to it),
    its float16 bits into ``half``."""
    cdef uint32_t bits = _f32_bits(x)
    cdef uint16_t sign = (bits >> 16) & 0x8000
    cdef uint32_t mag = bits & 0x7FFFFFFFu
    cdef int e
    cdef double scaled
    if mag > 0x7F800000u:  # NaN: never equal to itself
        return 0
    if mag == 0x7F800000u:
        half[0] = sign | 0x7C00
        return 1
    if mag == 0:
        half[0] = sign
        return 1
    if mag > _F32_BEYOND_HALF:
        return 0
    e = <int> (mag >> 23) - 127
    if e >= -14:  # a normal float16: 10 bits of mantissa
        if mag & 0x1FFF:
            return 0
        half[0] = sign | <uint16_t> ((e + 15) << 10) | <uint16_t> ((mag >> 13) & 0x3FF)
        return 1
    scaled = <double> _bits_f32(mag) * 16777216.0  # a subnormal float16: a multiple of 2**-24
    if scaled != floor(scaled):
        return 0
    half[0] = sign | <uint16_t> scaled
    return 1


def encode_neighbours(
    const int64_t[::1] ids,
    const float[::1] weights,
    uint64_t index_size,
    const int8_t[::1] direction,
    double found_cos,
    bint short_ids,
):
    """`online.stores.Neighbours` with a direction as its version 4 record, in one compiled
    pass; `decode_neighbours` reads it back. The weights are kept a byte each when they lie
    on the byte grid (`online.stores.byte_grid_codes`' arithmetic: float32 shares of the
    largest, rounded to 255 steps in float64), their codes Rice-coded when they never rise
    (`pack_descending`), else in half precision when every one is a float16 value, else as
    float32; the direction in 4 bits a code when every code lies in [-8, 7]; ``found_cos``
    in 3 bytes when its float32 lies in [0.5, 2). Raises OverflowError for a ``found_cos``
    beyond float32 (as struct's ``f`` does)."""
    cdef Py_ssize_t n = ids.shape[0], dim = direction.shape[0], i, at, size
    if weights.shape[0] != n:
        raise ValueError("as many weights as ids")
    cdef uint8_t stack_codes[257]
    cdef uint8_t* byte_codes = stack_codes
    cdef bytearray long_codes
    if n > 257:  # a long list's byte codes (the stack holds a usual one's)
        long_codes = bytearray(n)
        byte_codes = <uint8_t*> PyByteArray_AS_STRING(long_codes)
    cdef int flags = _N_DIRECTION | (_N_SHORT_IDS if short_ids else 0)
    cdef float top = 0.0, w
    cdef bint on_grid = n > 0, halves = 1
    cdef double ratio
    cdef uint16_t half
    # the byte grid: each weight's share of the largest (NaN: off the grid)
    for i in range(n):
        if isnan(weights[i]):
            on_grid = 0
        elif weights[i] >= top:  # numpy's max: the last of equals (-0.0 after 0.0)
            top = weights[i]
    for i in range(n if on_grid else 0):
        w = weights[i]
        ratio = <double> (w / top) if top > 0 else 0.0
        if isnan(ratio):  # an infinite weight
            on_grid = 0
            break
        ratio = 0.0 if ratio < 0.0 else (1.0 if ratio > 1.0 else ratio)
        byte_codes[i] = <uint8_t> rint(ratio * _N_WEIGHT_STEPS)
        if top * (<float> byte_codes[i] / _N_WEIGHT_STEPS) != w:
            on_grid = 0
            break
    cdef uint32_t drops[256]
    cdef int k = 0
    cdef Py_ssize_t descending = _plan_descending(byte_codes, n, drops, &k) if on_grid else 0
    cdef Py_ssize_t weight_bytes
    if on_grid:
        flags |= _N_BYTE_WEIGHTS | (_N_DESCENDING if descending else 0)
        weight_bytes = 4 + (descending if descending else n)
    else:
        for i in range(n):
            if not _half_exact(weights[i], &half):
                halves = 0
                break
        flags |= _N_HALF_WEIGHTS if halves else 0
        weight_bytes = (2 if halves else 4) * n
    cdef bint nibbles = dim > 0
    for i in range(dim):
        if direction[i] < -8 or direction[i] > 7:
            nibbles = 0
            break
    cdef Py_ssize_t direction_bytes = (dim + 1) // 2 if nibbles else dim
    cdef uint32_t cos_bits = _f32_bits(_to_f32(found_cos))
    cdef Py_ssize_t cos_bytes = 3 if (cos_bits >> 24) == 0x3F else 4
    flags |= (_N_NIBBLES if nibbles else 0) | (_N_COS_MANTISSA if cos_bytes == 3 else 0)
    cdef Py_ssize_t id_bytes = _N_PREFIX_BYTES if short_ids else 8
    size = 2 + _varint_size(index_size) + _varint_size(n) + _varint_size(dim)
    size += id_bytes * n + weight_bytes + cos_bytes + direction_bytes
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef uint8_t* p = <uint8_t*> PyBytes_AS_STRING(out)
    cdef uint64_t v
    cdef int j
    p[0], p[1] = 4, <uint8_t> flags
    at = _put_varint(p, 2, index_size)
    at = _put_varint(p, at, <uint64_t> n)
    at = _put_varint(p, at, <uint64_t> dim)
    for i in range(n):
        v = <uint64_t> (ids[i] >> _N_PREFIX_SHIFT) if short_ids else <uint64_t> ids[i]
        for j in range(id_bytes):
            p[at + j] = <uint8_t> (v >> (8 * j))
        at += id_bytes
    if on_grid:
        store_u32le(<uint32_t*> (p + at), _f32_bits(top))
        at += 4
        if descending:
            _put_descending(p + at, byte_codes, n, drops, k, descending)
            at += descending
        else:
            memcpy(p + at, byte_codes, n)
            at += n
    elif halves:
        for i in range(n):
            _half_exact(weights[i], &half)
            p[at], p[at + 1] = <uint8_t> (half & 0xFF), <uint8_t> (half >> 8)
            at += 2
    else:
        for i in range(n):
            store_u32le(<uint32_t*> (p + at), _f32_bits(weights[i]))
            at += 4
    for j in range(cos_bytes):
        p[at + j] = <uint8_t> (cos_bits >> (8 * j))
    at += cos_bytes
    if nibbles:
        for i in range(direction_bytes):
            p[at + i] = <uint8_t> (direction[2 * i] & 0x0F)
            if 2 * i + 1 < dim:
                p[at + i] |= <uint8_t> ((direction[2 * i + 1] & 0x0F) << 4)
    else:
        for i in range(dim):
            p[at + i] = <uint8_t> direction[i]
    return out


# -- the embedded store's page records ------------------------------------------------------------

cdef Py_ssize_t _RECORD_SECTIONS = 3, _RECORD_HEAD_SIZE = 12


def record_sections(list records, Py_ssize_t which):
    """Section ``which`` of each of `online.stores.CompactMemoryPageStore`'s page records (a
    head of three little-endian uint32 section lengths, then the sections in order), or None
    for a missing record (None) or an empty section; raises ValueError on a record shorter
    than its head says.

    >>> import struct
    >>> record = struct.pack("<III", 2, 0, 3) + b"ab" + b"xyz"
    >>> record_sections([record, None], 2), record_sections([record], 1)
    ([b'xyz', None], [None])
    """
    if which < 0 or which >= _RECORD_SECTIONS:
        raise ValueError(f"no section {which}")
    cdef list out = []
    cdef Py_ssize_t size, start, length, j
    cdef const uint8_t* p
    for record in records:
        if record is None:
            out.append(None)
            continue
        size = len(<bytes> record)
        p = <const uint8_t*> PyBytes_AS_STRING(record)
        if size < _RECORD_HEAD_SIZE:
            raise ValueError("truncated page record")
        start = _RECORD_HEAD_SIZE
        for j in range(which):
            start += load_u32le(p + 4 * j)
        length = load_u32le(p + 4 * which)
        if start + length > size:
            raise ValueError("truncated page record")
        out.append(PyBytes_FromStringAndSize(<const char*> p + start, length) if length else None)
    return out


# -- drift ------------------------------------------------------------------------------------------

ctypedef fused _real:
    float
    double


def direction_cosine(const _real[::1] vector, const int8_t[::1] codes):
    """The cosine similarity of ``vector`` to the direction ``codes`` (as many), summed in
    float64 in order; NaN where either is zero or not finite (`online.neighbour_search.
    moved_materially` then searches again). One pass, no float64 copies: it runs for every
    fetch of a page whose vector changed.

    >>> import numpy as np
    >>> round(direction_cosine(np.array([3.0, 4.0]), np.array([3, 4], np.int8)), 12)
    1.0
    >>> direction_cosine(np.zeros(2, np.float32), np.array([1, 0], np.int8))
    nan
    """
    cdef Py_ssize_t i, n = vector.shape[0]
    if codes.shape[0] != n:
        raise ValueError("the vector and the direction differ in size")
    cdef double dot = 0.0, vv = 0.0, cc = 0.0, x, c, norms
    for i in range(n):
        x = vector[i]
        c = codes[i]
        dot += x * c
        vv += x * x
        cc += c * c
    norms = sqrt(vv * cc)
    if not norms > 0.0 or isinf(norms):
        return NAN
    return dot / norms


def direction_codes(const _real[::1] vector, int levels):
    """A vector's direction as int8 codes: ``rint(v * (levels / max|v|))`` in float64 (the
    largest component at +-``levels``), all zeros for a zero vector or one that is not
    finite. What `online.stores.direction_codes` computes with numpy, in one pass over the
    vector: it runs for every related-page search.

    >>> import numpy as np
    >>> direction_codes(np.array([0.5, -1.0, 0.26], np.float32), 7).tolist()
    [4, -7, 2]
    >>> direction_codes(np.array([np.nan, 1.0]), 7).tolist()
    [0, 0]
    """
    if levels < 0 or levels > 127:
        raise ValueError("levels must be within 0..127")
    cdef Py_ssize_t i, n = vector.shape[0]
    out = np.zeros(n, dtype=np.int8)
    cdef int8_t[::1] codes = out
    cdef double top = 0.0, x, scale
    for i in range(n):
        x = vector[i]
        if x != x:
            return out
        if x < 0.0:
            x = -x
        if x > top:
            top = x
    if top == 0.0 or isinf(top):
        return out
    scale = levels / top
    for i in range(n):
        codes[i] = <int8_t> rint(vector[i] * scale)
    return out


def merge_page_records(dict records, dict changed):
    """`online.stores.CompactMemoryPageStore`'s write: for each page id of ``changed``, its
    record in ``records`` rebuilt with the sections given (a list of three: bytes, or None to
    keep the stored section), in place. Returns how many pages gained a history state (a
    first one, or one after none was held). Raises ValueError on a stored record shorter than
    its head says; the records before it are then already merged (the caller's batch fails).

    >>> import struct
    >>> records = {7: struct.pack("<III", 2, 0, 3) + b"ab" + b"xyz"}
    >>> merge_page_records(records, {7: [None, b"N", None], 8: [b"s", None, None]})
    1
    >>> records[7] == struct.pack("<III", 2, 1, 3) + b"abNxyz", records[8][12:]
    (True, b's')
    """
    cdef Py_ssize_t lengths[3]
    cdef const char* parts[3]
    cdef Py_ssize_t size, at, total, j
    cdef const uint8_t* p
    cdef char* q
    cdef int gained = 0
    cdef bint had_state
    cdef bytes out, stored
    cdef list sections
    for pid, new in changed.items():
        sections = <list?> new
        if len(sections) != _RECORD_SECTIONS:
            raise ValueError(f"{len(sections)} sections for page {pid}, not 3")
        old = records.get(pid)
        if old is None:
            size = 0
            p = NULL
        else:
            stored = <bytes?> old
            size = len(stored)
            p = <const uint8_t*> PyBytes_AS_STRING(stored)
            if size < _RECORD_HEAD_SIZE:
                raise ValueError("truncated page record")
        at = _RECORD_HEAD_SIZE
        total = _RECORD_HEAD_SIZE
        had_state = 0
        for j in range(_RECORD_SECTIONS):
            section = sections[j]
            if p != NULL:
                lengths[j] = load_u32le(p + 4 * j)
                if at + lengths[j] > size:
                    raise ValueError("truncated page record")
                parts[j] = <const char*> p + at
                at += lengths[j]
                if j == 0:
                    had_state = lengths[0] > 0
            else:
                lengths[j] = 0
                parts[j] = NULL
            if section is not None:
                lengths[j] = len(<bytes?> section)
                parts[j] = PyBytes_AS_STRING(section)
            total += lengths[j]
        if lengths[0] > 0 and not had_state:
            gained += 1
        out = PyBytes_FromStringAndSize(NULL, total)
        q = PyBytes_AS_STRING(out)
        at = _RECORD_HEAD_SIZE
        for j in range(_RECORD_SECTIONS):
            store_u32le(<uint32_t*> (q + 4 * j), <uint32_t> lengths[j])
            if lengths[j]:
                memcpy(q + at, parts[j], lengths[j])
            at += lengths[j]
        records[pid] = out
    return gained


# -- stats rows out of Redis record heads -------------------------------------------------------

cdef enum:
    _STATS_FULL = 0  # `online.stores.pack_floats` layouts
    _STATS_COMPACT = 1


def record_head_stats(list heads, const uint8_t[::1] wide, float[:, ::1] out):
    """Decode each page record head's stats section (`streams.redis_scripts`: a head of
    either version, then `online.stores.pack_floats` bytes) into row ``i`` of ``out``,
    leaving rows of absent heads (None) and of empty sections untouched; what
    `online.stores.unpack_float_rows` gives for the same sections, in one pass and without
    slicing each head. ``wide`` marks the columns kept in float32 by the compact layout.

    Returns ``(-1, 0, 0, 0)``, or, for the first bad head, ``(row, reason, got, expected)``:
    reason 1: not a page record (``got``, ``expected`` 0); 2: a stats section of ``got``
    bytes where its layout takes ``expected``; 3: an unknown layout.

    >>> import numpy as np, struct
    >>> wide = np.array([0, 1], dtype=np.uint8)
    >>> compact = bytes([1]) + np.float16(0.5).tobytes() + np.float32(0.1).tobytes()
    >>> full = bytes([0]) + np.array([2.0, 3.0], dtype="<f4").tobytes()
    >>> heads = [bytes([2, 7, 0, 0, 0, 0, 0, 0]) + compact + b"state", None,
    ...          struct.pack("<BBIIHI", 1, 9, 0, 0, 0, 0) + full]
    >>> out = np.full((3, 2), np.nan, dtype=np.float32)
    >>> record_head_stats(heads, wide, out), out.tolist()[0][0], out.tolist()[2]
    ((-1, 0, 0, 0), 0.5, [2.0, 3.0])
    >>> record_head_stats([bytes([2, 7, 0, 0, 0, 0, 0, 0]) + compact[:5]], wide, out)
    (0, 2, 5, 7)
    >>> record_head_stats([b"x"], wide, out)
    (0, 1, 0, 0)
    """
    cdef Py_ssize_t n = out.shape[1], n_wide = 0, i, j, size, head_size, length
    cdef Py_ssize_t narrow_at, wide_at, full_size, compact_size
    cdef const uint8_t* p
    cdef const uint8_t* s
    cdef const float* table = &_half[0]
    cdef bytes head
    if wide.shape[0] != n:
        raise ValueError(f"{wide.shape[0]} wide flags for {n} columns")
    if len(heads) > out.shape[0]:
        raise ValueError(f"{len(heads)} heads for {out.shape[0]} rows")
    for j in range(n):
        n_wide += wide[j] != 0
    full_size = 1 + 4 * n
    compact_size = 1 + 2 * (n - n_wide) + 4 * n_wide
    for i in range(len(heads)):
        item = heads[i]
        if item is None:
            continue
        if type(item) is not bytes:
            return (i, 1, 0, 0)
        head = <bytes> item
        size = len(head)
        p = <const uint8_t*> PyBytes_AS_STRING(head)
        if size >= 1 and p[0] == 1:
            head_size = 16  # `streams.redis_scripts.RECORD_HEADS`' sizes (a test checks)
        elif size >= 1 and p[0] == 2:
            head_size = 8
        else:
            return (i, 1, 0, 0)
        if size < head_size:
            return (i, 1, 0, 0)
        length = p[1]
        if length == 0:
            continue
        # a head cut short of its stats counts as a section of the bytes present
        if head_size + length > size:
            length = size - head_size
            if length == 0:
                return (i, 3, 0, 0)
        s = p + head_size
        if s[0] == _STATS_FULL:
            if length != full_size:
                return (i, 2, length, full_size)
            for j in range(n):
                out[i, j] = _bits_f32(load_u32le(s + 1 + 4 * j))
        elif s[0] == _STATS_COMPACT:
            if length != compact_size:
                return (i, 2, length, compact_size)
            narrow_at = 1
            wide_at = 1 + 2 * (n - n_wide)
            for j in range(n):
                if wide[j]:
                    out[i, j] = _bits_f32(load_u32le(s + wide_at))
                    wide_at += 4
                else:
                    out[i, j] = table[<uint16_t> s[narrow_at] | (<uint16_t> s[narrow_at + 1] << 8)]
                    narrow_at += 2
        else:
            return (i, 3, length, 0)
    return (-1, 0, 0, 0)
