"""fp16: IEEE half precision, two values a word; stochastic rounding.

About 3 significant digits; magnitudes past 65504 overflow to inf, which a push then refuses
as non-finite (nothing changed: lower the learning rate), so fp16 suits values of a known,
moderate range, as embedding values are. Conversion works on the bits (numba has no float16).
A normal half keeps the top 10 of float32's 23 mantissa bits; rounding adds 13 random bits
below them and truncates (a carry moves into the exponent, as it should):

    |x| bits - (112 << 23)   then   (that + noise & 0x1FFF) >> 13   =  the half's bits
A value under the least normal half (2**-14) is a count of steps of 2**-24: floor(|x| 2**24 + u).
"""

import numba as nb
import numpy as np

from cardinal.embedding.formats.base import RowFormat
from cardinal.embedding.formats.rounding import noise, row_key
from cardinal.embedding.hashing import U64


@nb.njit(inline="always")
def half_bits(bits, rand):
    """The half of float32 ``bits`` (uint32), rounded with 64 random bits ``rand``."""
    sign = np.uint32((bits >> np.uint32(16)) & np.uint32(0x8000))
    mag = bits & np.uint32(0x7FFFFFFF)
    if mag > np.uint32(0x7F800000):  # NaN
        return np.uint16(0x7E00)
    if mag >= np.uint32(0x38800000):  # a normal half, or past the largest: inf
        h = (U64(mag) - U64(112 << 23) + (rand & U64(0x1FFF))) >> U64(13)
        return np.uint16(sign | np.uint32(min(h, U64(0x7C00))))
    x = np.float32(np.uint32(mag).view(np.float32) * np.float32(16777216.0))  # in steps of 2**-24, exact
    u = np.float32((rand >> U64(40)) * (1.0 / 16777216.0))
    return np.uint16(sign | np.uint32(np.floor(x + u)))


@nb.njit(nogil=True, cache=True)
def encode_fp16(bits, ids, step, halves, rows):
    """bits,    # (n, dim) uint32: the float32 values' bits
    halves,  # (R, 2 * width) uint16: the stored words as halves"""
    for i in range(rows.shape[0]):
        r = rows[i]
        key = row_key(ids[i], step)
        for j in range(bits.shape[1]):
            halves[r, j] = half_bits(bits[i, j], noise(key, j))


@nb.njit(nogil=True, cache=True)
def decode_fp16(halves, rows, dim, out):
    """rows,  # (n,) int64; out (n, dim) uint32: float32 bits"""
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(dim):
            if r < 0:
                out[i, j] = 0
                continue
            h = np.uint32(halves[r, j])
            sign = (h & np.uint32(0x8000)) << np.uint32(16)
            e = (h >> np.uint32(10)) & np.uint32(0x1F)
            m = h & np.uint32(0x3FF)
            if e == 0:  # zero or subnormal: m steps of 2**-24
                tiny = np.float32(np.float32(m) * np.float32(5.9604645e-08))
                out[i, j] = sign | tiny.view(np.uint32)
            elif e == 31:  # inf, NaN
                out[i, j] = sign | np.uint32(0x7F800000) | (m << np.uint32(13))
            else:
                out[i, j] = sign | ((e + np.uint32(112)) << np.uint32(23)) | (m << np.uint32(13))


class FP16(RowFormat):
    name = "fp16"

    def value_words(self, dim):
        return (dim + 1) // 2

    def decode(self, data, rows, dim, out):
        decode_fp16(data.view(np.uint16), rows, dim, out.view(np.uint32))

    def encode(self, values, ids, step, data, rows):
        encode_fp16(values.view(np.uint32), ids, np.uint32(step), data.view(np.uint16), rows)
