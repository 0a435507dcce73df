"""Ids that stress a hash index: all equal, sequential, sharing low bits, the int64 extremes."""

import numpy as np

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
ID_KINDS = ["equal", "sequential", "low_bits", "extremes", "random"]


def adversarial_ids(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` ids of one of ``ID_KINDS``."""
    if kind == "equal":
        return np.full(n, 12345, np.int64)
    if kind == "sequential":
        return np.arange(n, dtype=np.int64) - n // 2
    if kind == "low_bits":  # differ only above bit 32
        return (np.arange(n, dtype=np.int64) << 32) | 0x7
    if kind == "extremes":
        base = np.array([INT64_MIN, INT64_MAX, 0, -1, 1, INT64_MIN + 1, INT64_MAX - 1], np.int64)
        return rng.choice(base, n)
    if kind == "random":
        return rng.integers(INT64_MIN, INT64_MAX, n, dtype=np.int64, endpoint=True)
    raise ValueError(kind)
