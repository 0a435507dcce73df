"""A counting Bloom filter: bounded memory whatever the number of ids.

``bloom_bytes`` one-byte counters; an id maps to K_HASHES of them (double hashing of its
index hash), and its count is their minimum (never below its true count; above it when ids
share all their counters, more often as the filter fills). A sighting raises only the
counters equal to that minimum ("conservative update", which keeps the overcount small);
counters saturate at 255, so a threshold is at most 255. Admitted ids are not removed: an
evicted row's id is admitted again at its next sighting.

Resharding sums the saved shards' counters (saturating): ids of different shards are
distinct, so the sum never counts an id less than it was seen; a shard then also carries
the other shards' counts, which only raises the overcount. The same ``bloom_bytes`` is
needed to load a filter back.

A filter that fills up admits everything: once most counters are raised, an id never seen
finds all its K_HASHES counters at the threshold already. So when more than MAX_FILL of the
counters are raised (the fill at which a Bloom filter with K_HASHES hashes is designed to
work: a never-seen id then reads at least 1 with probability MAX_FILL ** K_HASHES = 1/8), every
counter is halved (TinyLFU's reset): ids seen once are forgotten, the others keep half their
count, and the fill drops. From then on an id's count can be below its sightings.
"""

import numba as nb
import numpy as np

from cardinal.embedding.admission.base import AdmissionFilter, Decision, check_part
from cardinal.embedding.hashing import U64, index_hash

K_HASHES = 3
MAX_FILL = 0.5  # share of raised counters past which every counter is halved


@nb.njit(inline="always")
def _position(h1, h2, k, m):
    return np.int64((h1 + U64(k) * h2) % U64(m))


@nb.njit(inline="always")
def _hashes(key, seed):
    h1 = index_hash(U64(key) ^ U64(seed))
    return h1, index_hash(h1) | U64(1)


@nb.njit(inline="always")
def _low(counters, h1, h2):
    """The smallest of a key's K_HASHES counters: its count."""
    low = 255
    for k in range(K_HASHES):
        c = counters[_position(h1, h2, k, counters.shape[0])]
        if c < low:
            low = c
    return low


@nb.njit(nogil=True, cache=True)
def estimate(counters, keys, seed, out):
    """out[i] = min of keys[i]'s K_HASHES counters.

    counters,  # (m,) uint8
    keys, out,  # (n,) int64, (n,) int64
    """
    for i in range(keys.shape[0]):
        h1, h2 = _hashes(keys[i], seed)
        out[i] = _low(counters, h1, h2)


@nb.njit(nogil=True, cache=True)
def add(counters, keys, seed):
    """One sighting of each of keys (n,) int64: raise the counters at their minimum (saturating).
    Returns how many counters were raised from zero."""
    raised = 0
    for i in range(keys.shape[0]):
        h1, h2 = _hashes(keys[i], seed)
        low = _low(counters, h1, h2)
        if low == 255:
            continue
        for k in range(K_HASHES):
            p = _position(h1, h2, k, counters.shape[0])
            if counters[p] == low:
                counters[p] = low + 1
                if low == 0:
                    raised += 1
    return raised


class BloomFilter(AdmissionFilter):
    name = "bloom"
    settings = ("threshold", "bloom_bytes", "seed")

    def __init__(self, config):
        super().__init__(config)
        self.counters = np.zeros(config.bloom_bytes, np.uint8)
        self.raised = 0  # counters above zero

    def estimate(self, ids: np.ndarray) -> np.ndarray:
        out = np.empty(len(ids), np.int64)
        estimate(self.counters, ids, np.int64(self.config.seed), out)
        return out

    def decide(self, ids, step):
        admitted = self.estimate(ids) + 1 >= self.config.threshold
        return Decision(admitted, lambda: self._add(ids[~admitted]))

    def _add(self, ids: np.ndarray) -> None:
        self.raised += add(self.counters, ids, np.int64(self.config.seed))
        while self.raised > MAX_FILL * len(self.counters):
            self.decay()

    def decay(self):
        self.counters >>= 1
        self.raised = int(np.count_nonzero(self.counters))

    def state(self):
        return {"counters": self.counters.copy()}

    def load(self, parts, mine):
        total = np.zeros(len(self.counters), np.int64)
        for part in parts:
            check_part(part, {"counters": np.uint8})
            if part["counters"].shape != self.counters.shape:
                raise ValueError(f"the saved bloom filter has {len(part['counters'])} counters, this one "
                                 f"{len(self.counters)}: load it with ps.memory.admission.bloom_bytes = "
                                 f"{len(part['counters'])}")
            total += part["counters"]
        self.counters = np.minimum(total, 255).astype(np.uint8)
        self.raised = int(np.count_nonzero(self.counters))

    @property
    def nbytes(self):
        return self.counters.nbytes

    def check(self):
        assert self.raised == np.count_nonzero(self.counters), "the bloom filter's count of raised counters is off"
