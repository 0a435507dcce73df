"""``Layouts``: a table's de-duplicated layout of a batch (unique ids, inverse, offsets), computed
once per batch for every collection that reads the same fields.

Two collections over one batch (the model's and the `lr` baseline's, ``train/baseline.py``) read
the same fields into tables of their own (``emb`` and ``lr_emb``): the same ids, so the same
unique ids, inverse and offsets. Sharing one ``Layouts`` makes the second collection's lookup
reuse the first's instead of de-duplicating the batch again:

    layouts = Layouts()
    model = EmbeddingCollection(source, features, layouts=layouts)
    baseline = EmbeddingCollection(source2, lr_features, layouts=layouts)

A batch is known by its sparse dict's identity (the dict is held, so its id is not reused) and
a layout by the fields and the hashing trick's buckets; the last ``keep`` batches are kept (this
step's and the next's, pulled ahead). The arrays are shared read-only.
"""

import time

import numpy as np

from cardinal.data.batch import Bag
from cardinal.embedding import unique_inverse
from cardinal.embedding.hashing import fold


def layout(sparse: dict[str, Bag], fields: list[str], buckets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unique, inverse, offsets) of the fields' ids concatenated in order: offsets (n_fields * B + 1,)
    lay the bags of every field one after another; ids folded into ``buckets`` rows first when > 0."""
    values = np.concatenate([sparse[f].values for f in fields])
    if buckets:
        fold(values, buckets, values)
    unique, inverse = unique_inverse(values)
    offsets, base = [], 0
    for f in fields:
        offsets.append(sparse[f].offsets[:-1] + base)
        base += len(sparse[f].values)
    return unique, inverse, np.concatenate([*offsets, [base]])


class Layouts:
    def __init__(self, keep: int = 2):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.keep = keep
        self._batches: list[tuple[dict, dict]] = []  # (sparse, {(fields, buckets): layout}), newest last
        self.hits = 0  # layouts handed out again, not computed

    def get(self, sparse: dict[str, Bag], fields: list[str], buckets: int, timings: dict) -> tuple:
        """The layout of ``fields`` in ``sparse`` (computing it adds its seconds to timings["dedup"])."""
        known = next((k for s, k in self._batches if s is sparse), None)
        if known is None:
            known = {}
            self._batches.append((sparse, known))
            del self._batches[:-self.keep]
        key = (tuple(fields), buckets)
        if key in known:
            self.hits += 1
            return known[key]
        start = time.perf_counter()
        known[key] = layout(sparse, fields, buckets)
        timings["dedup"] += time.perf_counter() - start
        return known[key]
