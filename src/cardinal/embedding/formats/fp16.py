"""fp16: IEEE half precision, two values a word; stochastic rounding.

About 3 significant digits; magnitudes past 65504 overflow to inf, which a push then refuses
as non-finite (nothing changed: lower the learning rate), so fp16 suits values of a known,
moderate range, as embedding values are. Rounding takes the half above a value x with
probability (x - lo) / (hi - lo), lo and hi the halves around it: unbiased (numba has no
float16: numpy converts).
"""

import numpy as np

from cardinal.embedding.formats.base import RowFormat
from cardinal.embedding.formats.rounding import uniforms


class FP16(RowFormat):
    name = "fp16"

    def value_words(self, dim):
        return (dim + 1) // 2

    def decode(self, data, rows, dim, out):
        halves = data.view(np.float16)
        out[:] = halves[np.maximum(rows, 0), :dim]
        out[rows < 0] = 0

    def encode(self, values, ids, step, data, rows):
        with np.errstate(over="ignore"):  # past 65504: inf, below
            near = values.astype(np.float16)  # round to nearest; then the halves either side of the value
        back = near.astype(np.float32)
        lo = np.where(back > values, np.nextafter(near, np.float16(-np.inf)), near)
        hi = np.where(back < values, np.nextafter(near, np.float16(np.inf)), near)
        u = np.empty(values.shape, np.float32)
        uniforms(ids, np.uint32(step), values.shape[1], u)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            p = (values - lo.astype(np.float32)) / (hi.astype(np.float32) - lo.astype(np.float32))  # NaN: exact
            out = np.where(u < p, hi, lo)
        out = np.where(np.isinf(near) & np.isfinite(values), near, out)  # past 65504: inf, as rounding says
        data.view(np.float16)[rows, :values.shape[1]] = out
