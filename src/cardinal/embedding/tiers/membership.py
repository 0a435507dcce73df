"""Which ids a cold tier may hold: a Bloom filter in RAM, so that lookups of ids it does not
hold (most lookups: a batch's new ids) never reach the disk store.

A growing tier adds a layer rather than rebuilding (a scalable Bloom filter, Almeida et al.
2007): when it holds as many ids as its layers were sized for, a new layer sized for as many
again takes the ids that come next, and a lookup tests every layer. Rebuilding from the tier's
keys is a scan of RocksDB, one Python call a key (about 1.5 us): a tier that grew to 270k rows
by rebuilds at each doubling read 540k keys for it, a fifth of a budgeted run's CPU. A scan
still merges the layers when there are MAX_LAYERS of them and the tier outgrows them.

Bits only, no deletion: ids that left the tier keep their bits until a rebuild, which also comes
once four times the ids the filter is sized for have left it. About BITS_PER_KEY bits per id,
K_HASHES probes: under 1% false positives a layer while fresh, under MAX_LAYERS % in all.
"""

import numba as nb
import numpy as np

from cardinal.embedding.hashing import U64, index_hash

K_HASHES = 4
BITS_PER_KEY = 10
MAX_LAYERS = 4


@nb.njit(nogil=True, cache=True)
def _set(bits, keys):
    """Set keys' (n,) int64 K_HASHES bits in ``bits`` (m,) uint8, m a power of two."""
    mask = U64(bits.shape[0] * 8 - 1)
    for i in range(keys.shape[0]):
        h1 = index_hash(U64(keys[i]) ^ U64(0x632BE59BD9B4E019))
        h2 = index_hash(h1) | U64(1)
        for k in range(K_HASHES):
            b = (h1 + U64(k) * h2) & mask
            bits[b >> U64(3)] |= np.uint8(1 << (b & U64(7)))


@nb.njit(nogil=True, cache=True)
def _test(bits, keys, out):
    """out[i] |= all of keys[i]'s bits are set (the id may be held)."""
    mask = U64(bits.shape[0] * 8 - 1)
    for i in range(keys.shape[0]):
        if out[i]:
            continue
        h1 = index_hash(U64(keys[i]) ^ U64(0x632BE59BD9B4E019))
        h2 = index_hash(h1) | U64(1)
        hit = True
        for k in range(K_HASHES):
            b = (h1 + U64(k) * h2) & mask
            if bits[b >> U64(3)] & np.uint8(1 << (b & U64(7))) == 0:
                hit = False
                break
        out[i] = hit


class KeyFilter:
    def __init__(self, capacity: int = 1 << 12):
        self.capacity = capacity  # ids its layers are sized for, together
        self.layers = [np.zeros(_bytes_for(capacity), np.uint8)]  # the newest last: it takes new ids
        self.stale = 0  # ids removed from the tier since the last rebuild (their bits still set)

    @property
    def nbytes(self) -> int:
        return sum(bits.nbytes for bits in self.layers)

    def add(self, keys: np.ndarray, held: int) -> None:
        """Note ``keys``, the tier then holding ``held`` ids: past the layers' size, a new layer for as many again."""
        if held > self.capacity:
            self.layers.append(np.zeros(_bytes_for(held), np.uint8))
            self.capacity += held
        _set(self.layers[-1], keys)

    def may_have(self, keys: np.ndarray) -> np.ndarray:
        out = np.zeros(len(keys), np.bool_)
        for bits in self.layers:
            _test(bits, keys, out)
        return out

    def needs_rebuild(self, held: int) -> bool:
        return (held > self.capacity and len(self.layers) >= MAX_LAYERS) or self.stale > 4 * self.capacity

    def rebuild(self, held: int, key_chunks) -> None:
        """Start again from the tier's keys (``key_chunks``: arrays of ids), one layer sized for twice ``held``."""
        self.capacity = max(1 << 12, 2 * held)
        self.layers = [np.zeros(_bytes_for(self.capacity), np.uint8)]
        self.stale = 0
        for keys in key_chunks:
            _set(self.layers[0], keys)


def _bytes_for(capacity: int) -> int:
    bits = 1 << max(6, int(capacity * BITS_PER_KEY - 1).bit_length())
    return bits // 8
