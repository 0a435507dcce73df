"""Slow, obviously-correct references for the compiled kernels (used by the tests).

Pure Python integers and numpy, written from the definitions rather than from the kernels,
so that a shared mistake is unlikely.
"""

import numpy as np

M64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fmix64_route(x: int, n_shards: int) -> int:
    h = (x & M64) ^ 0x2545F4914F6CDD1D
    h = ((h ^ (h >> 33)) * 0xFF51AFD7ED558CCD) & M64
    h = ((h ^ (h >> 33)) * 0xC4CEB9FE1A85EC53) & M64
    return (h ^ (h >> 33)) % n_shards


def init_row(seed: int, key: int, dim: int, scale: float) -> np.ndarray:
    base = splitmix64(int(key) & M64) ^ splitmix64(seed & M64)
    out = np.empty(dim, np.float32)
    for j in range(dim):
        bits = splitmix64((base + (j // 2) * 0xD1B54A32D192ED03) & M64)
        bits24 = bits >> 40 if j % 2 == 0 else (bits >> 8) & 0xFFFFFF
        u = np.float32(bits24 / 16777216.0)
        out[j] = (np.float32(2.0) * u - np.float32(1.0)) * np.float32(scale)
    return out


def unique_inverse(ids) -> tuple[np.ndarray, np.ndarray]:
    first: dict[int, int] = {}
    inverse = [first.setdefault(int(k), len(first)) for k in ids]
    return np.array(list(first), np.int64), np.array(inverse, np.int64)


def segment_sum(values: np.ndarray, inverse: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, values.shape[1]), values.dtype)
    for i, j in enumerate(inverse):
        out[j] += values[i]
    return out


def lowest_keys(key, last_step, cutoff: int, k: int) -> np.ndarray:
    """The k lowest keys among rows with last_step < cutoff, ties by row, as increasing row numbers."""
    eligible = [i for i in range(len(key)) if int(last_step[i]) < cutoff]
    chosen = sorted(eligible, key=lambda i: (int(key[i]), i))[:max(k, 0)]
    return np.array(sorted(chosen), np.int64)
