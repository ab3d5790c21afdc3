# Little-endian loads and stores of uint32, shared by the compiled modules (cimport only).
from libc.stdint cimport uint8_t, uint32_t


cdef inline void store_u32le(uint32_t* at, uint32_t value) noexcept nogil:
    cdef uint8_t* b = <uint8_t*> at
    b[0] = value & 0xFF
    b[1] = (value >> 8) & 0xFF
    b[2] = (value >> 16) & 0xFF
    b[3] = (value >> 24) & 0xFF


cdef inline uint32_t load_u32le(const uint8_t* p) noexcept nogil:
    return (
        (<uint32_t> p[0]) | (<uint32_t> p[1] << 8) | (<uint32_t> p[2] << 16)
        | (<uint32_t> p[3] << 24)
    )
