"""One worker's share of every global batch, and the grouping of parsed rows into batches.

A global batch is ``batch_size`` consecutive input lines (TSV) or rows (Parquet, MovieLens),
counted over a reader's files in order, so a batch may span files. Worker ``rank`` of ``world``
takes, of the batch of lines [s, s + n), the lines [s + n*rank//world, s + n*(rank+1)//world)
(n = batch_size, or fewer for the last batch). With batch_size=5, world=2 and 12 lines:

    batch 0 = lines 0..4    rank 0: 0, 1     rank 1: 2, 3, 4
    batch 1 = lines 5..9    rank 0: 5, 6     rank 1: 7, 8, 9
    batch 2 = lines 10, 11  rank 0: 10       rank 1: 11          (n = 2 for the last batch)

Batch boundaries are fixed by line counts alone, so a bad line (dropped from its batch) never
moves a boundary, whichever worker meets it; every worker yields one batch per global batch,
empty where its share is empty or all bad, so all take the same number of steps.
"""

from collections.abc import Iterator
from typing import Protocol, Self

import numpy as np


class Sliceable(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, s: slice) -> Self: ...
    @staticmethod
    def concat(parts: list) -> Self: ...


def check_share(share: tuple[int, int]) -> tuple[int, int]:
    """``(rank, world)`` as given, or a TypeError/ValueError saying what is wrong."""
    if not isinstance(share, tuple | list) or len(share) != 2 or \
            not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in share):
        raise TypeError(f"share must be (rank, world), two integers, got {share!r}")
    rank, world = int(share[0]), int(share[1])
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"share (rank, world) needs world >= 1 and 0 <= rank < world, got ({rank}, {world})")
    return rank, world


def bounds(n: int, share: tuple[int, int]) -> tuple[int, int]:
    """[lo, hi): the share's lines within a batch of ``n`` lines."""
    rank, world = share
    return n * rank // world, n * (rank + 1) // world


def count_in(a: int, b: int, batch_size: int, lo: int, hi: int) -> int:
    """How many global lines g in [a, b) have lo <= g % batch_size < hi."""
    def upto(x: int) -> int:
        return x // batch_size * (hi - lo) + min(max(x % batch_size - lo, 0), hi - lo)
    return upto(b) - upto(a)


def by_batch(pieces: Iterator[tuple[Sliceable, np.ndarray, int]], batch_size: int) -> Iterator[Sliceable]:
    """One part per global batch, in order, from ``(rows, line, done)`` pieces.

    ``rows`` are parsed rows in line order, ``line`` (len(rows),) int64 the global line of each,
    and ``done`` the global line before which every line was handled. A batch is yielded once
    ``done`` passes its end (empty if none of its rows are here); the last, shorter one at the end.
    """
    pending, lines, next_b, done = [], [], 0, 0
    for rows, line, done in pieces:
        pending.append(rows)
        lines.append(line)
        complete = done // batch_size
        if complete <= next_b:
            continue
        merged, at = type(rows).concat(pending), np.concatenate(lines)
        cuts = np.searchsorted(at, np.arange(next_b + 1, complete + 1) * batch_size)
        start = 0
        for cut in cuts.tolist():
            yield merged[start:cut]
            start = cut
        pending, lines, next_b = [merged[start:]], [at[start:]], complete
    if done > next_b * batch_size:
        yield type(pending[0]).concat(pending)
