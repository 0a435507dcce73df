"""The two fixed hashes of Cardinal, and the deterministic row initialiser.

Two hashes, deliberately unrelated, so that routing ids to shards does not skew the
per-shard hash index (a shard that only receives ids whose index hash shares some bits
would crowd those bits into a few sub-tables):

- ``index_hash``: the splitmix64 finaliser. It places an id in a table's hash index.
- ``route_hash``: the murmur3 ``fmix64`` finaliser of ``id XOR ROUTE_SEED``. An id lives on
  shard ``route_hash(id) % n_shards``. It is part of the checkpoint format
  (``ROUTING_NAME``): changing it would strand every saved row on the wrong shard.

Both treat the int64 id as its two's-complement uint64 bits, so every int64 is valid.
"""

import numba as nb
import numpy as np

U64 = np.uint64
ROUTE_SEED = 0x2545F4914F6CDD1D
FOLD_SALT = 0x6A09E667F3BCC909
ROUTING_NAME = "murmur3-fmix64(id ^ 0x2545F4914F6CDD1D) % n_shards"


@nb.njit(inline="always")
def index_hash(key):
    """splitmix64 finaliser of an int64 key, as uint64."""
    z = U64(key) + U64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
    return z ^ (z >> U64(31))


@nb.njit(nogil=True, cache=True)
def fold(ids, n, out):
    """out[i] = the bucket in [0, n) of ids[i]: the hashing trick (ids that share a bucket share
    a row). A third hash, salted, so buckets are independent of shards and index slots.

    ids, out,  # (m,) int64
    """
    for i in range(ids.shape[0]):
        out[i] = np.int64(index_hash(U64(ids[i]) ^ U64(FOLD_SALT)) % U64(n))


@nb.njit(inline="always")
def route_hash(key):
    """murmur3 fmix64 of ``key ^ ROUTE_SEED``, as uint64."""
    h = U64(key) ^ U64(ROUTE_SEED)
    h = (h ^ (h >> U64(33))) * U64(0xFF51AFD7ED558CCD)
    h = (h ^ (h >> U64(33))) * U64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> U64(33))


@nb.njit(nogil=True, cache=True)
def init_rows(ids, data, start, stop, dim, seed, scale, first=0):
    """Fill ``data[start:stop, :dim]`` with values drawn from (seed, id) alone.

    ids,   # (>= stop,) int64: the id of each row
    data,  # (>= stop, dim + state) float32: values, then optimizer state (left untouched)
    first  # the row's first value is value ``first`` of the whole row (a column piece, ``sharding/plan.py``)
    Each value is uniform in [-scale, scale): values 2k and 2k+1 of the row of ``id`` take
    24 bits each of one hash of (seed, id, k), so a row is the same whatever the shard count,
    the column split or the arrival order.
    """
    s = index_hash(seed)
    for r in range(start, stop):
        base = index_hash(ids[r]) ^ s
        j = 0
        if first % 2:  # the piece starts at the second value of a pair
            bits = index_hash(base + U64(first // 2) * U64(0xD1B54A32D192ED03))
            data[r, 0] = _uniform((bits >> U64(8)) & U64(0xFFFFFF), scale)
            j = 1
        pair = (first + j) // 2
        for k in range((dim - j) // 2):  # whole pairs, no branch: the compiler runs several hashes at once
            bits = index_hash(base + U64(pair + k) * U64(0xD1B54A32D192ED03))
            data[r, j + 2 * k] = _uniform(bits >> U64(40), scale)
            data[r, j + 2 * k + 1] = _uniform((bits >> U64(8)) & U64(0xFFFFFF), scale)
        if (dim - j) % 2:  # the piece ends at the first value of a pair
            bits = index_hash(base + U64((first + dim - 1) // 2) * U64(0xD1B54A32D192ED03))
            data[r, dim - 1] = _uniform(bits >> U64(40), scale)


@nb.njit(inline="always")
def _uniform(bits24, scale):
    u = np.float32(bits24 * (1.0 / 16777216.0))  # 24 bits -> [0, 1), exact in float32
    return (np.float32(2.0) * u - np.float32(1.0)) * np.float32(scale)
