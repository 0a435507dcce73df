"""Monolith's probabilistic filter: each sighting admits an id with probability p.

An id seen n times has a row with probability 1 - (1 - p)^n, and the filter keeps no state
at all. The coin is a hash of (seed, step, id), not a random generator, so a run repeats bit
for bit; an id pulled twice in one step (two workers) tosses the same coin twice.
"""

import numba as nb
import numpy as np

from cardinal.embedding.admission.base import AdmissionFilter, Decision
from cardinal.embedding.hashing import U64, index_hash


@nb.njit(nogil=True, cache=True)
def coins(keys, seed, step, out):
    """out[i] = a uniform float64 in [0, 1) from (seed, step, keys[i]).

    keys, out,  # (n,) int64, (n,) float64
    """
    salt = index_hash(U64(seed) ^ (U64(step) << U64(32)) ^ U64(0x5851F42D4C957F2D))
    for i in range(keys.shape[0]):
        h = index_hash(U64(keys[i]) ^ salt)
        out[i] = np.float64(h >> U64(11)) * (1.0 / 9007199254740992.0)


class ProbabilityFilter(AdmissionFilter):
    name = "probability"
    settings = ("probability", "seed")

    def decide(self, ids, step):
        out = np.empty(len(ids), np.float64)
        coins(ids, np.int64(self.config.seed), np.int64(step), out)
        return Decision(out < self.config.probability, lambda: None)
