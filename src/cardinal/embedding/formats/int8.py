"""int8 with a per-row scale: 1 byte a value plus one float32 word a row; stochastic rounding.

Symmetric, as the wire's int8 codec: scale = max|x| / 127 for each row, q in [-127, 127],
decoded as q * scale. Rounding is floor(x / scale + u) with u uniform in [0, 1): unbiased, so
small updates add up instead of vanishing below half a step. A row holding inf or NaN gets a
NaN scale (it decodes to NaN, and the push is refused as non-finite).

    word 0: scale (float32)   words 1..: q0 q1 q2 q3 | q4 ... (int8, four a word)
"""

import numba as nb
import numpy as np

from cardinal.embedding.formats.base import RowFormat
from cardinal.embedding.formats.rounding import noise, row_key
from cardinal.embedding.hashing import U64


@nb.njit(nogil=True, cache=True)
def decode_int8(data, q, rows, dim, out):
    """data,  # (R, width) float32: word 0 the scale
    q,     # (R, 4 * width) int8: the same memory as bytes, values from byte 4
    rows,  # (n,) int64; out (n, dim) float32"""
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0:
            for j in range(dim):
                out[i, j] = 0.0
            continue
        s = data[r, 0]
        for j in range(dim):
            out[i, j] = np.float32(q[r, 4 + j]) * s


@nb.njit(nogil=True, cache=True)
def encode_int8(values, ids, step, data, q, rows):
    """values,  # (n, dim) float32; data, q, rows as in decode_int8"""
    n, dim = values.shape
    for i in range(n):
        r = rows[i]
        m = np.float32(0.0)
        finite = True
        for j in range(dim):
            a = abs(values[i, j])
            if not a <= np.float32(3.4028235e38):
                finite = False
            else:
                m = max(m, a)
        s = m / np.float32(127.0)
        if m > 0 and s == 0:  # a row of subnormals: the step is the least float32
            s = np.float32(1e-45)
        if not finite:
            s = np.float32(np.nan)
        data[r, 0] = s
        key = row_key(ids[i], step)
        for j in range(dim):
            if s == 0 or not finite:
                q[r, 4 + j] = 0
                continue
            u = np.float32((noise(key, j) >> U64(40)) * (1.0 / 16777216.0))
            v = np.floor(values[i, j] / s + u)
            q[r, 4 + j] = np.int8(min(max(v, np.float32(-127.0)), np.float32(127.0)))


class INT8(RowFormat):
    name = "int8"

    def value_words(self, dim):
        return 1 + (dim + 3) // 4

    def decode(self, data, rows, dim, out):
        decode_int8(data, data.view(np.int8), rows, dim, out)

    def encode(self, values, ids, step, data, rows):
        encode_int8(values, ids, np.uint32(step), data, data.view(np.int8), rows)
