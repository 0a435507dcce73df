"""Bags of ids written as lists, one list an example."""

import numpy as np

from cardinal.data import Bag


def bag(rows: list[list[int]]) -> Bag:
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    return Bag(np.array([i for r in rows for i in r], np.int64), offsets)
