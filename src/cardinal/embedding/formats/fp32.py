"""fp32: values stored as they are, 4 bytes each; the table updates these rows in place."""

import numpy as np

from cardinal.embedding import row_kernels as RK
from cardinal.embedding.formats.base import RowFormat


class FP32(RowFormat):
    name = "fp32"
    exact = True

    def value_words(self, dim):
        return dim

    def decode(self, data, rows, dim, out):
        RK.gather(data, rows, dim, out)

    def encode(self, values, ids, step, data, rows):
        data[rows, :values.shape[1]] = values

    def working(self, data, rows, dim):
        return data[rows]

    def store(self, data, rows, work, dim, ids, step):
        data[rows] = work

    def first_nonfinite(self, data, rows, lo, hi, dim):
        return RK.first_nonfinite(data.view(np.int32), rows, lo, hi)

    def values(self, data, dim):
        return data[:, :dim]
