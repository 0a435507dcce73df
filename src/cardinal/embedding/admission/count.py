"""Exact counting: an id is admitted on its ``threshold``-th sighting.

Every id not yet admitted has an exact counter (12 bytes plus its index slot), so the memory
grows with the number of distinct ids seen once: the price of exactness. An admitted id's
counter is dropped (its row counts from then on); an evicted row's id starts again from zero.
Under a memory budget the counters age out instead (``ps/server/budget.py`` calls ``decay``): every
count is halved, the ids seen once are forgotten, and the rest are packed into a fresh map.
"""

import numpy as np

from cardinal.embedding.admission.base import AdmissionFilter, Decision, check_part
from cardinal.embedding.key_counts import KeyCounts

EMPTY_BYTES = KeyCounts().nbytes  # an empty map's index


class CountFilter(AdmissionFilter):
    name = "count"
    settings = ("threshold",)

    def __init__(self, config):
        super().__init__(config)
        self.counts = KeyCounts()

    def decide(self, ids, step):
        seen = self.counts.get(ids).astype(np.int64) + 1
        admitted = seen >= self.config.threshold

        def commit():
            self.counts.set(ids[~admitted], seen[~admitted].astype(np.uint32))
            self.counts.remove(ids[admitted])
        return Decision(admitted, commit)

    def state(self):
        ids, counts = self.counts.items()
        return {"ids": ids, "counts": counts}

    def load(self, parts, mine):
        for part in parts:
            check_part(part, {"ids": np.int64, "counts": np.uint32})
            if len(np.unique(part["ids"])) != len(part["ids"]) or (part["counts"] == 0).any():
                raise ValueError("ids must be unique and counts >= 1")
        self.counts = KeyCounts()
        for part in parts:
            keep = mine(part["ids"])
            self.counts.set(part["ids"][keep], part["counts"][keep])

    @property
    def nbytes(self):
        return self.counts.nbytes

    @property
    def decayable_bytes(self):
        return self.counts.nbytes - EMPTY_BYTES

    def decay(self):
        ids, counts = self.counts.items()
        keep = counts > 1
        self.counts = KeyCounts()
        self.counts.set(ids[keep], counts[keep] >> np.uint32(1))

    def check(self):
        self.counts.check()
