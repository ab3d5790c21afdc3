# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Kafka's default partitioner, compiled: murmur2 of the key, as the Java client and aiokafka's
`DefaultPartitioner` compute it (aiokafka's is plain Python, about 3 % of a live worker's
time when it chose the partition of every priority it published)."""

from libc.stdint cimport uint8_t, uint32_t

from online._le cimport load_u32le


cdef uint32_t SEED = 0x9747B28C
cdef uint32_t M = 0x5BD1E995


cdef uint32_t _murmur2(const uint8_t* data, Py_ssize_t length) noexcept nogil:
    cdef uint32_t m = M, h = SEED ^ <uint32_t> length, k
    cdef Py_ssize_t i, tail = length & ~3
    for i in range(0, tail, 4):
        k = load_u32le(data + i) * m
        k ^= k >> 24
        k *= m
        h = (h * m) ^ k
    cdef Py_ssize_t extra = length & 3
    if extra >= 3:
        h ^= (<uint32_t> data[tail + 2]) << 16
    if extra >= 2:
        h ^= (<uint32_t> data[tail + 1]) << 8
    if extra >= 1:
        h ^= data[tail]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


def murmur2(const uint8_t[::1] data not None):
    """Kafka's murmur2 hash of ``data`` (the same number as `aiokafka.partitioner.murmur2`;
    Kafka's own test vector: -973932308 as a signed 32-bit int).

    >>> murmur2(b"21")
    3321034988
    """
    return _murmur2(&data[0] if data.shape[0] else NULL, data.shape[0])


def partition_of(bytes key not None, Py_ssize_t partitions):
    """The partition (0 .. ``partitions`` - 1) Kafka's default partitioner gives ``key``."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    cdef const uint8_t[::1] view = key
    cdef uint32_t h = _murmur2(&view[0] if view.shape[0] else NULL, view.shape[0])
    return <Py_ssize_t> ((h & 0x7FFFFFFF) % <uint32_t> partitions)
