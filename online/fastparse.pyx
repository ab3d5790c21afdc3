# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The event parser's fast path, compiled: a decoded JSON event whose fields all have their
plain types becomes a `Fetch` in one call, without the validating model.

It may only decline (return None), never judge: whatever it does not recognise goes to
`online.events.parse_event`, which decides acceptance and names errors; the tests hold the
two paths equal on arbitrary input (tests/test_parse_fast.py).

* `FastFetch`: the whole fast path (numbers, time stamps, URL, outlinks, embedding, digests);
* `outlink_summary`: a page's canonical outlinks to sorted 32-bit fingerprints (XXH3 from the
  vendored xxhash.h) with their internal flags;
* `unit_vector_bytes` / `unit_vector_from_list`: an embedding to a unit float32 vector, the
  norm summed in float64 in order (the validating path calls the same kernel).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsDouble
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.math cimport floor, isfinite, sqrt
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy


from online._le cimport store_u32le


cdef extern from *:
    """
    #define XXH_INLINE_ALL
    #include "xxhash.h"
    """
    unsigned long long XXH3_64bits(const void* data, size_t length) nogil
    unsigned int XXH32(const void* data, size_t length, unsigned int seed) nogil


cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object, int*) except? -1
    bint PyUnicode_IS_ASCII(object)
    void* PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    bint PyUnicode_CheckExact(object)
    bint PyFloat_CheckExact(object)
    bint PyLong_CheckExact(object)
    bint PyList_CheckExact(object)
    Py_ssize_t PyList_GET_SIZE(object)
    PyObject* PyList_GET_ITEM(object, Py_ssize_t)


#: Squared norms in (0, this] are finite, non-zero and every component is far inside float32's
#: range (|x| <= 1e38): the contract's checks on an embedding in one sum.
cdef double MAX_SQUARED_NORM = 1e76


cdef uint64_t LOW32 = (<uint64_t> 1 << 32) - 1
cdef uint8_t HOST_CHAR[256]
cdef uint8_t PATH_CHAR[256]


cdef void _char_classes():
    cdef int c
    for c in range(256):
        HOST_CHAR[c] = (97 <= c <= 122) or (48 <= c <= 57) or c == 95 or c == 46 or c == 45
        PATH_CHAR[c] = 33 <= c <= 126 and c != 35  # printable ASCII but ' ' and '#'


_char_classes()


cdef inline bint _canonical(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    """A URL `online.links.normalize_url` returns unchanged, by the fast path's strict rule:
    ``https?://`` + a host of ``[a-z0-9_.-]`` not ending in '.' + '/' + printable ASCII
    without '#', not ending in '?'."""
    cdef Py_ssize_t i, start
    if n >= 8 and memcmp(s, b"https://", 8) == 0:
        start = 8
    elif n >= 7 and memcmp(s, b"http://", 7) == 0:
        start = 7
    else:
        return False
    i = start
    while i < n and HOST_CHAR[s[i]]:
        i += 1
    # a host, then '/', and the host does not end in '.'
    if i == start or i == n or s[i] != 47 or s[i - 1] == 46:
        return False
    while i < n and PATH_CHAR[s[i]]:
        i += 1
    return i == n and s[n - 1] != 63  # '?' last: maybe an empty query, which is dropped


cdef inline bint _starts(const unsigned char* s, Py_ssize_t n, bytes prefix) noexcept:
    cdef Py_ssize_t m = len(prefix)
    return n >= m and memcmp(s, PyBytes_AS_STRING(prefix), m) == 0


def outlink_summary(list links, tuple prefixes):
    """``(sorted fingerprints as <u4 bytes, internal flags as bytes, internal count, count)``
    of a page's outlinks, if every one is a canonical URL and no two share a fingerprint;
    else None (the caller's general loop then decides, and keeps first occurrences).

    ``prefixes`` are the page's canonical internal URL starts as ASCII bytes (a link starting
    with one is internal). A link's fingerprint is the low 32 bits of XXH3-64 of its text, as
    `online.links` computes it. An empty list gives empty fingerprints.

    >>> fps, flags, internal, n = outlink_summary(
    ...     ["https://a.org/x", "https://b.org/"], (b"https://a.org/",))
    >>> sorted(flags), internal, n, len(fps)
    ([0, 1], 1, 2, 8)
    >>> outlink_summary(["https://a.org/x#top"], (b"https://a.org/",))
    """
    cdef Py_ssize_t n = PyList_GET_SIZE(links), i, j, n_internal = 0, k
    cdef Py_ssize_t n_prefixes = len(prefixes)
    cdef object url
    cdef const unsigned char* s
    cdef Py_ssize_t length
    cdef uint64_t* keyed
    cdef uint64_t key
    cdef bint internal
    cdef bytes fps_out, flags_out
    cdef uint32_t* fps_data
    cdef uint8_t* flag_data
    cdef uint8_t* flags_in
    if n == 0:
        return b"", b"", 0, 0
    # (fingerprint << 32 | position): sorting the keys sorts by fingerprint, ties by position.
    keyed = <uint64_t*> malloc(n * sizeof(uint64_t))
    flags_in = <uint8_t*> malloc(n)
    if keyed == NULL or flags_in == NULL:
        free(keyed)
        free(flags_in)
        raise MemoryError()
    try:
        for i in range(n):
            url = <object> PyList_GET_ITEM(links, i)
            if not PyUnicode_CheckExact(url) or not PyUnicode_IS_ASCII(url):
                return None
            s = <const unsigned char*> PyUnicode_DATA(url)
            length = PyUnicode_GET_LENGTH(url)
            if not _canonical(s, length):
                return None
            internal = False
            for k in range(n_prefixes):
                if _starts(s, length, <bytes> prefixes[k]):
                    internal = True
                    break
            flags_in[i] = internal
            n_internal += internal
            key = XXH3_64bits(s, <size_t> length) & LOW32
            keyed[i] = (key << 32) | <uint64_t> i
        _sort(keyed, n)
        fps_out = PyBytes_FromStringAndSize(NULL, 4 * n)
        flags_out = PyBytes_FromStringAndSize(NULL, n)
        fps_data = <uint32_t*> PyBytes_AS_STRING(fps_out)
        flag_data = <uint8_t*> PyBytes_AS_STRING(flags_out)
        for i in range(n):
            if i and (keyed[i] >> 32) == (keyed[i - 1] >> 32):
                return None  # a repeated link or a 32-bit collision: first occurrence rules
            j = <Py_ssize_t> (keyed[i] & LOW32)
            store_u32le(fps_data + i, <uint32_t> (keyed[i] >> 32))
            flag_data[i] = flags_in[j]
        return fps_out, flags_out, n_internal, n
    finally:
        free(keyed)
        free(flags_in)


cdef void _sort(uint64_t* a, Py_ssize_t n) noexcept nogil:
    """Ascending sort of distinct keys: insertion sort for a page's few dozen links, else a
    heap sort (no recursion, no worst case)."""
    cdef Py_ssize_t i, j
    cdef uint64_t v
    if n <= 64:
        for i in range(1, n):
            v = a[i]
            j = i - 1
            while j >= 0 and a[j] > v:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = v
        return
    for i in range(n // 2 - 1, -1, -1):
        _sift(a, i, n)
    for i in range(n - 1, 0, -1):
        v = a[0]
        a[0] = a[i]
        a[i] = v
        _sift(a, 0, i)


cdef inline void _sift(uint64_t* a, Py_ssize_t root, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t child
    cdef uint64_t v = a[root]
    while True:
        child = 2 * root + 1
        if child >= n:
            break
        if child + 1 < n and a[child + 1] > a[child]:
            child += 1
        if a[child] <= v:
            break
        a[root] = a[child]
        root = child
    a[root] = v


cdef bytes _unit(float* values, Py_ssize_t n):
    """float32 values scaled to unit length, as <f4 bytes: the norm summed in float64, in
    order, and each value divided in float64 before rounding (a float32 norm of subnormal
    values would itself be subnormal, and off by up to a percent)."""
    cdef double total = 0.0
    cdef Py_ssize_t i
    cdef double norm
    for i in range(n):
        total += <double> values[i] * <double> values[i]
    norm = sqrt(total)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 4 * n)
    cdef uint32_t* data = <uint32_t*> PyBytes_AS_STRING(out)
    cdef float scaled
    cdef uint32_t bits
    for i in range(n):
        scaled = <float> (<double> values[i] / norm)
        memcpy(&bits, &scaled, 4)
        store_u32le(data + i, bits)
    return out


def unit_vector_bytes(const float[::1] values):
    """A non-zero float32 vector scaled to unit length, as little-endian float32 bytes.

    >>> import numpy as np
    >>> np.frombuffer(unit_vector_bytes(np.array([3, 4], np.float32)), "<f4").tolist()
    [0.6000000238418579, 0.800000011920929]
    """
    return _unit(<float*> &values[0], values.shape[0]) if values.shape[0] else b""


def unit_vector_from_list(object values, Py_ssize_t dim):
    """`unit_vector_bytes` of an embedding given as a list of exactly ``dim`` plain floats or
    ints, if its squared norm is in (0, 1e76] and it is not zero in float32; else None
    (not plain, or the contract's checks must name the problem).

    >>> unit_vector_from_list([0.0, 2.0], 2) == unit_vector_bytes(__import__("numpy").array([0, 1], "f4"))
    True
    >>> unit_vector_from_list([0.0, float("nan")], 2) is None
    True
    """
    cdef Py_ssize_t i
    cdef double x, total = 0.0
    cdef object item
    cdef bint nonzero = False
    if not PyList_CheckExact(values) or PyList_GET_SIZE(values) != dim or dim == 0:
        return None
    cdef float* single = <float*> malloc(dim * sizeof(float))
    if single == NULL:
        raise MemoryError()
    try:
        for i in range(dim):
            item = <object> PyList_GET_ITEM(values, i)
            if PyFloat_CheckExact(item):
                x = PyFloat_AS_DOUBLE(item)
            elif PyLong_CheckExact(item):
                try:
                    x = PyLong_AsDouble(item)
                except OverflowError:
                    return None
            else:
                return None
            total += x * x
            single[i] = <float> x
            nonzero = nonzero or single[i] != 0.0
        if not (0.0 < total <= MAX_SQUARED_NORM) or not nonzero:
            return None
        return _unit(single, dim)
    finally:
        free(single)




# -- the whole fast path --------------------------------------------------------------------------

cdef int64_t MAX_EXACT = (<int64_t> 1) << 53  # ints up to here are exact as floats
cdef double MS_WATERSHED = 2e10  # pydantic reads epoch numbers beyond this as milliseconds
#: The optional page numbers in `Fetch` order, and which of them are counts (ints >= 0).
cdef tuple NUMBER_FIELDS = (
    "content_size",
    "text_size",
    "text_quality",
    "inlinks_internal",
    "inlinks_external",
    "pagerank",
    "trustrank",
)
cdef bint IS_COUNT[7]
IS_COUNT[:] = [True, True, False, True, True, False, False]


cdef inline object _get(dict data, str key):
    cdef PyObject* found = PyDict_GetItem(data, key)
    return None if found == NULL else <object> found


cdef class FastFetch:
    """``(decoded event, embedding dim, max outlinks) -> Fetch | None``: the record of an event
    whose every field has exactly its plain expected type, else None ("not sure", never
    "invalid"). What it accepts equals ``prepare(parse_event(raw))``.

    Built once with the Python pieces it defers to: the `Fetch` constructor, `link_info`
    (cached URL parsing), `canonical_summary` and the general outlink loop for lists that are
    not all canonical and distinct (``(fingerprints, flags, internal, links, dropped)``).
    """

    cdef object new_fetch, link_info, canonical_summary, general_links
    cdef double low[7]
    cdef double high[7]

    def __init__(self, new_fetch, link_info, canonical_summary, general_links, tuple lows,
                 tuple highs):
        """``lows`` / ``highs``: the inclusive range of each of `number_fields`; a number
        outside it is declined (the validating path names the bound)."""
        cdef Py_ssize_t i
        self.new_fetch = new_fetch
        self.link_info = link_info
        self.canonical_summary = canonical_summary
        self.general_links = general_links
        if len(lows) != 7 or len(highs) != 7:
            raise ValueError("expected 7 lower and 7 upper bounds")
        for i in range(7):
            self.low[i] = lows[i]
            self.high[i] = highs[i]

    @staticmethod
    def number_fields():
        """The optional page numbers, in the order of the bounds given to the constructor."""
        return NUMBER_FIELDS

    def __call__(self, dict data, Py_ssize_t embedding_dim, Py_ssize_t max_outlinks,
                 Py_ssize_t max_url_length, double earliest, double latest):
        cdef object url = _get(data, "url")
        cdef object outlinks = _get(data, "outlinks")
        cdef object crawl = _get(data, "crawl")
        cdef object digest = _get(data, "content_digest")
        cdef object text = _get(data, "text")
        cdef object embedding = _get(data, "embedding")
        cdef PyObject* status_item = PyDict_GetItem(data, "status")
        cdef object status = 200 if status_item == NULL else <object> status_item
        cdef double stamp
        cdef long long whole
        cdef int overflow
        cdef object vector = None
        if not PyUnicode_CheckExact(url) or not _timestamp(_get(data, "fetched_at"), &stamp):
            return None
        if not earliest <= stamp <= latest or PyUnicode_GET_LENGTH(url) > max_url_length:
            return None
        if not PyList_CheckExact(outlinks) or PyList_GET_SIZE(outlinks) > max_outlinks:
            return None
        if _longest(outlinks) > max_url_length:
            return None
        if not PyLong_CheckExact(status) or not 100 <= status <= 599:
            return None
        if crawl is not None:
            if not PyLong_CheckExact(crawl):
                return None
            whole = PyLong_AsLongLongAndOverflow(crawl, &overflow)
            if overflow or not -MAX_EXACT <= whole <= MAX_EXACT:
                return None
        if digest is not None and not PyUnicode_CheckExact(digest):
            return None
        if text is not None and not PyUnicode_CheckExact(text):
            return None
        numbers = _numbers(data, self.low, self.high)
        if numbers is None:
            return None
        if embedding is not None:
            vector = unit_vector_from_list(embedding, embedding_dim)
            if vector is None:
                return None
        try:
            page = self.link_info(url)
            normalised = page[0]
            if normalised != url:  # the validator parses the normalised URL again
                page = self.link_info(normalised)
            summary = self.canonical_summary(outlinks, page)
            if summary is None:
                fps, flags, n_internal, n_links, dropped = self.general_links(outlinks, page)
            else:
                fps, flags, n_internal, n_links = summary
                dropped = 0
            source_fp = 0
            if vector is not None:
                source_fp = _xxh32(vector, 0) or 1
            elif text:
                source_fp = _xxh32(text, 1) or 1
            digest_fp = (_xxh32(digest, 0) or 1) if digest else 0
        except ValueError:  # InvalidURL, or text that cannot be encoded: the slow path says
            return None
        size, text_size, quality, inlinks_internal, inlinks_external, pagerank, trustrank = (
            numbers
        )
        return self.new_fetch(
            normalised,
            page[4],  # page id
            stamp,
            status,
            crawl,
            size,
            text_size,
            quality,
            n_internal,
            n_links - n_internal,
            inlinks_internal,
            inlinks_external,
            pagerank,
            trustrank,
            digest_fp,
            fps,
            flags,
            vector,
            source_fp,
            text if vector is None else None,
            dropped,
        )


cdef unsigned int _xxh32(object value, unsigned int seed) except? 0:
    """XXH32 of bytes, or of a str's UTF-8 (UnicodeEncodeError, a ValueError, for text that
    has none, such as lone surrogates)."""
    cdef const char* data
    cdef Py_ssize_t length
    if isinstance(value, bytes):
        return XXH32(PyBytes_AS_STRING(value), len(<bytes> value), seed)
    data = PyUnicode_AsUTF8AndSize(value, &length)
    return XXH32(data, <size_t> length, seed)


cdef Py_ssize_t _longest(list items):
    """The length of the longest string among ``items`` (other items count 0)."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(items), longest = 0, length
    cdef object item
    for i in range(n):
        item = <object> PyList_GET_ITEM(items, i)
        if PyUnicode_CheckExact(item):
            length = PyUnicode_GET_LENGTH(item)
            if length > longest:
                longest = length
    return longest


cdef list _numbers(dict data, double* low, double* high):
    """The optional page numbers in `Fetch` order rounded to float32 (None where absent), or
    None if one is not a plain int (counts: >= 0) or finite float within [low, high]."""
    cdef list out = [None] * 7
    cdef Py_ssize_t i
    cdef object value
    cdef long long whole
    cdef int overflow
    cdef double x
    for i in range(7):
        value = _get(data, <str> NUMBER_FIELDS[i])
        if value is None:
            continue
        if PyLong_CheckExact(value):
            whole = PyLong_AsLongLongAndOverflow(value, &overflow)
            if overflow or whole > MAX_EXACT or whole < (0 if IS_COUNT[i] else -MAX_EXACT):
                return None
            x = <double> whole
        elif IS_COUNT[i] or not PyFloat_CheckExact(value):
            return None
        else:
            x = PyFloat_AS_DOUBLE(value)
            if not isfinite(x):
                return None
        if not low[i] <= x <= high[i]:
            return None
        out[i] = <double> <float> x  # beyond float32's range: its infinity, as _f32 gives
    return out


cdef bint _timestamp(object value, double* out) except -1:
    """Epoch seconds of a plain ``fetched_at`` (strict ISO text, or whole seconds as an int
    or float from 0 up to the milliseconds watershed); False if not such a value."""
    cdef long long whole
    cdef int overflow
    cdef double x
    if PyUnicode_CheckExact(value):
        return _iso_timestamp(value, out)
    if PyLong_CheckExact(value):
        whole = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow or not 0 <= whole < MS_WATERSHED:
            return False
        out[0] = <double> whole
        return True
    if PyFloat_CheckExact(value):
        x = PyFloat_AS_DOUBLE(value)
        # pydantic rounds fractions of a second its own way: leave those to it
        if 0.0 <= x < MS_WATERSHED and x == floor(x):
            out[0] = x
            return True
    return False


cdef inline int _digits(const unsigned char* s, Py_ssize_t at, Py_ssize_t count) noexcept nogil:
    """The number written by ``count`` ASCII digits at ``at``, or -1."""
    cdef int value = 0
    cdef Py_ssize_t i
    for i in range(at, at + count):
        if not 48 <= s[i] <= 57:
            return -1
        value = value * 10 + (s[i] - 48)
    return value


cdef inline int64_t _days_from_civil(int64_t y, int m, int d) noexcept nogil:
    """Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    cdef int64_t era = (y if y >= 0 else y - 399) // 400
    cdef int64_t yoe = y - era * 400
    cdef int64_t doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    cdef int64_t doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef int DAYS_IN_MONTH[13]
DAYS_IN_MONTH[:] = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


cdef bint _iso_timestamp(str text, double* out) except -1:
    """``YYYY-MM-DDTHH:MM:SS[.f{1,6}][Z|±HH:MM]`` with a real date from 1900 into 2255 (while
    its microseconds from the epoch are exact in a double; no timezone: UTC) as epoch seconds,
    rounded as ``datetime.timestamp`` rounds; False for anything else (the general path then
    reads it)."""
    if not PyUnicode_IS_ASCII(text):
        return False
    cdef const unsigned char* s = <const unsigned char*> PyUnicode_DATA(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), at = 19, digits = 0
    cdef int year, month, day, hour, minute, second, micro = 0, offset = 0, oh, om, scale
    cdef int64_t total
    if n < 19 or s[4] != 45 or s[7] != 45 or s[10] != 84 or s[13] != 58 or s[16] != 58:
        return False
    year = _digits(s, 0, 4)
    month = _digits(s, 5, 2)
    day = _digits(s, 8, 2)
    hour = _digits(s, 11, 2)
    minute = _digits(s, 14, 2)
    second = _digits(s, 17, 2)
    if year < 1900 or year > 2255 or month < 1 or month > 12 or day < 1:
        return False
    if day > DAYS_IN_MONTH[month] + (
        month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    ):
        return False
    if hour < 0 or hour > 23 or minute < 0 or minute > 59 or second < 0 or second > 59:
        return False
    if at < n and s[at] == 46:  # '.': 1 to 6 digits of a second
        at += 1
        while at < n and digits < 7 and 48 <= s[at] <= 57:
            micro = micro * 10 + (s[at] - 48)
            digits += 1
            at += 1
        if digits < 1 or digits > 6:
            return False
        scale = 6 - digits
        while scale:
            micro *= 10
            scale -= 1
    if at < n:
        if s[at] == 90 and at + 1 == n:  # 'Z'
            at += 1
        elif (s[at] == 43 or s[at] == 45) and at + 6 == n and s[at + 3] == 58:  # ±HH:MM
            oh = _digits(s, at + 1, 2)
            om = _digits(s, at + 4, 2)
            if oh < 0 or oh > 23 or om < 0 or om > 59:
                return False
            offset = (oh * 3600 + om * 60) * (1 if s[at] == 43 else -1)
            at += 6
        else:
            return False
    if at != n:
        return False
    total = (
        _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset
    ) * 1000000 + micro
    if total > MAX_EXACT or total < -MAX_EXACT:
        return False  # seconds from such a count are rounded in two steps here: decline
    out[0] = <double> total / 1e6
    return True
