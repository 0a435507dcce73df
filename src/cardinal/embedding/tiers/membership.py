"""Which ids a cold tier may hold: a Bloom filter in RAM, so that lookups of ids it does not
hold (most lookups: a batch's new ids) never reach the disk store.

Bits only, no deletion: ids that left the tier keep their bits until the filter is rebuilt from
the tier's keys (a scan), which the tier does when it outgrows the filter (sized for twice the
ids held at the last rebuild) or when four times that many ids have left it. About
BITS_PER_KEY bits per id, K_HASHES probes: under 1% false positives while fresh.
"""

import numba as nb
import numpy as np

from cardinal.embedding.hashing import U64, index_hash

K_HASHES = 4
BITS_PER_KEY = 10


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
    """out[i] = all of keys[i]'s bits are set (the id may be held)."""
    mask = U64(bits.shape[0] * 8 - 1)
    for i in range(keys.shape[0]):
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
        self.capacity = capacity  # ids it is sized for
        self.bits = np.zeros(_bytes_for(capacity), np.uint8)
        self.stale = 0  # ids removed from the tier since the last rebuild (their bits still set)

    @property
    def nbytes(self) -> int:
        return self.bits.nbytes

    def add(self, keys: np.ndarray) -> None:
        _set(self.bits, keys)

    def may_have(self, keys: np.ndarray) -> np.ndarray:
        out = np.empty(len(keys), np.bool_)
        _test(self.bits, keys, out)
        return out

    def needs_rebuild(self, held: int) -> bool:
        return held > self.capacity or self.stale > 4 * self.capacity

    def rebuild(self, held: int, key_chunks) -> None:
        """Start again from the tier's keys (``key_chunks``: arrays of ids), sized for twice ``held``."""
        self.capacity = max(1 << 12, 2 * held)
        self.bits = np.zeros(_bytes_for(self.capacity), np.uint8)
        self.stale = 0
        for keys in key_chunks:
            _set(self.bits, keys)


def _bytes_for(capacity: int) -> int:
    bits = 1 << max(6, int(capacity * BITS_PER_KEY - 1).bit_length())
    return bits // 8
