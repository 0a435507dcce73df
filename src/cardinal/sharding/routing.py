"""Which shard holds an id: ``route_hash(id) % n_shards`` (see ``embedding/hashing.py``).

    ids     [ 7, 3, 9, 4, 8 ]          route    [ 1, 0, 1, 0, 1 ]
    order   [ 1, 3 | 0, 2, 4 ]         offsets  [ 0, 2, 5 ]
so shard s gets ids[order[offsets[s]:offsets[s+1]]], in their original order: a stable
split, which keeps duplicate-gradient sums (added in order of appearance) the same for any
shard count.
"""

import numba as nb
import numpy as np

from cardinal.embedding.hashing import U64, route_hash


@nb.njit(nogil=True, cache=True)
def _route(ids, n_shards, out):
    for i in range(ids.shape[0]):
        out[i] = np.int64(route_hash(ids[i]) % U64(n_shards))


@nb.njit(nogil=True, cache=True)
def _split(shards, n_shards, order, offsets):
    for i in range(shards.shape[0]):
        offsets[shards[i] + 1] += 1
    for s in range(n_shards):
        offsets[s + 1] += offsets[s]
    cursor = offsets[:-1].copy()
    for i in range(shards.shape[0]):
        s = shards[i]
        order[cursor[s]] = i
        cursor[s] += 1


def route(ids: np.ndarray, n_shards: int) -> np.ndarray:
    """Shard of each id, (n,) int64."""
    out = np.empty(len(ids), np.int64)
    _route(ids, n_shards, out)
    return out


def split(ids: np.ndarray, n_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, offsets): a stable grouping of positions by shard."""
    return group(route(ids, n_shards), n_shards)


def group(shards: np.ndarray, n_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, offsets) of positions grouped by their shard ``shards`` (n,) int64, stably
    (the shards of a sharding plan, ``plan.py``)."""
    order = np.empty(len(shards), np.int64)
    offsets = np.zeros(n_shards + 1, np.int64)
    _split(shards, n_shards, order, offsets)
    return order, offsets
