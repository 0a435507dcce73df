"""Chunked rows (FIITED): each row keeps the prefix of its value chunks that is worth its memory.

A row of dim values is C chunks of s = (dim - t) / C columns, then t tail columns (a wide
part's first-order weight) that are never freed. A chunk's values and its slice of every
per-element optimizer state block live in a pool row of their own; the row's words hold a
handle per chunk, a utility per chunk, the tail and the optimizer's scalar state. dim 8, C 2,
t 0, row-wise Adagrad (a = 0 per-element blocks, b = 1 scalar):

    row words   [ h0 h1 | u0 u1 | acc ]        h = 0: no chunk (reads zeros), h = p + 1: pool row p
    pool row p  [ w0 w1 w2 w3 ]                with Adam (a = 2): [ w0..w3 | m0..m3 | v0..v3 ]

Utility: every push adds each chunk's squared gradient norm to its utility (float32, held at
FLOAT32_MAX; a GEO push, its delta's), held or not (so an id pushed often counts more, and a
freed chunk whose gradients grow can come back); a freed chunk's gradient is otherwise dropped.
Every ``chunk_every`` steps ``adjust`` keeps, per row, the longest prefix of chunks whose
utilities all pass one threshold, chosen so that at most ``target`` of the chunks of the rows
in RAM are live. Chunk 0 is always kept: a row that is
worth nothing is for eviction to delete, and a row that kept its first chunk still reads as an
embedding. Then it copies the live chunks densely into a new pool, in row order, and unmaps the
old one (the freed memory goes back to the OS), and halves every utility (recent pushes count
more). A chunk that comes back starts at zero: values 0, its state 0 (the row's scalar state,
e.g. Adam's step count, is the row's and stays). The pass covers the rows in RAM: rows in the
cold tier keep their chunks as they left until they come back.

Workers see the full dim: a pull reads zeros for chunks a row does not hold. A new row starts
with the first ``start`` chunks: as many as keep its words and chunks within a plain float32
row's (dim 16, C 4, row-wise Adagrad: 2 of 4; dim 64: 3), so a table is never larger than fp32's
before its first pass (a row holding every chunk, handles and utilities too, was 1.44x); the pass
gives the others to the rows whose gradients earn them (their utilities count from the first
push; their gradients are dropped until then, a new row's first update included). Portable
rows (the disk tier, checkpoints, a push's backup) are whole: ``[ working row | utility (C) |
live (C): 1.0 or 0.0 ]``, so a row written out and placed back is the same row, bit for bit.
One instance per table: it owns the table's pool; the table's lock is held around every call.
"""

import math

import numpy as np

from cardinal.embedding.arena import Arena
from cardinal.embedding.formats import chunk_kernels as K
from cardinal.embedding.formats.base import RowFormat
from cardinal.embedding.formats.fp32 import FP32

DECAY = np.float32(0.5)  # utilities are multiplied by this after each adjust pass
_PLAIN = FP32()  # portable rows are plain float32 words


def state_layout(state_width) -> tuple[int, int]:
    """(a, b) with state_width(dim) = a dim + b: an optimizer's per-element blocks and scalars.
    Every sparse optimizer lays its state out as a blocks of dim then b scalars (adagrad [s],
    rowwise_adagrad [s], adam [m | v | t], ftrl [z | n], sgd none: ``optim/``)."""
    a = state_width(2) - state_width(1)
    b = state_width(1) - a
    assert a >= 0 and b >= 0 and all(state_width(d) == a * d + b for d in (3, 7, 64)), "state is not a dim + b"
    return a, b


class ChunkPool:
    """Chunks of ``words`` float32 in an arena; freed chunk numbers are reused, the last freed
    first, before the arena grows."""

    def __init__(self, words: int):
        self.words = words
        self.arena = Arena(np.float32, (words,), capacity=1)
        self.used = 0  # chunk numbers [0, used) have been handed out
        self._free = np.empty(0, np.int64)  # a stack of freed chunk numbers: [0, n_free)
        self.n_free = 0

    @property
    def live(self) -> int:
        return self.used - self.n_free

    def alloc(self, k: int) -> np.ndarray:
        """(k,) int64 chunk numbers, freed ones first; may grow the arena (no view may be held)."""
        take = min(k, self.n_free)
        out = np.empty(k, np.int64)
        out[:take] = self._free[self.n_free - take:self.n_free][::-1]
        self.n_free -= take
        out[take:] = np.arange(self.used, self.used + k - take)
        self.used += k - take
        self.arena.reserve(self.used)
        return out

    def free(self, chunks: np.ndarray) -> None:
        need = self.n_free + len(chunks)
        if need > len(self._free):
            self._free = np.concatenate([self._free[:self.n_free], np.empty(max(need, 2 * len(self._free)) -
                                                                           self.n_free, np.int64)])
        self._free[self.n_free:need] = chunks
        self.n_free = need

    def replace(self, arena: Arena, used: int) -> None:
        """The chunks are now [0, used) of ``arena``; the old arena is unmapped."""
        self.arena.close()
        self.arena, self.used, self.n_free, self._free = arena, used, 0, np.empty(0, np.int64)


class Chunked(RowFormat):
    name = "fp32"  # values are float32, in the pool; checkpoints record the chunk layout besides
    exact = False

    def __init__(self, dim: int, chunks: int, tail: int, state_width, target: float):
        self.a, self.b = state_layout(state_width)
        self.C, self.t, self.target = chunks, tail, target
        self.s = (dim - tail) // chunks
        assert chunks >= 1 and 0 <= tail < dim and self.s * chunks == dim - tail and 0 < target <= 1
        self.dim = dim
        self.pool = ChunkPool((1 + self.a) * self.s)
        chunk = (1 + self.a) * self.s  # a chunk's words; a plain row spends C of them where this one has 2 C words
        self.start = min(chunks, max(1, (chunks * chunk - 2 * chunks) // chunk))  # of handles and utilities
        self._tile = np.empty((K.TILE, (1 + self.a) * dim + self.b), np.float32)  # a push's scratch (lock held)
        self._order = np.arange(K.TILE, dtype=np.int64)

    def __repr__(self) -> str:
        return f"<row format fp32 in {self.C} chunks of {self.s} (tail {self.t}), target {self.target}>"

    def _args(self):
        return self.C, self.s, self.t, self.a, self.b

    def value_words(self, dim):
        return 2 * self.C + self.t  # handles, utilities, tail values; the tail's state follows

    def width(self, dim, state_width):
        assert dim == self.dim and state_width == self.a * dim + self.b
        return 2 * self.C + (1 + self.a) * self.t + self.b

    def portable_width(self, dim, state_width):
        return dim + state_width + 2 * self.C

    @property
    def portable_form(self):
        return _PLAIN

    @property
    def extra_bytes(self):
        return self.pool.live * self.pool.words * 4

    @property
    def live(self) -> int:
        """Chunks held by rows (in RAM)."""
        return self.pool.live

    def _gather(self, data, rows, full, out=None):
        if out is None:
            out = np.empty((len(rows), (1 + self.a) * self.dim + self.b if full else self.dim), np.float32)
        K.gather(data, data.view(np.int32), self.pool.arena.array, np.asarray(rows, np.int64), *self._args(), full, out)
        return out

    def decode(self, data, rows, dim, out):
        self._gather(data, rows, False, out)

    def encode(self, values, ids, step, data, rows):
        work = self.working(data, rows, self.dim)
        work[:, :self.dim] = values
        self.store(data, rows, work, self.dim, ids, step)

    def working(self, data, rows, dim):
        return self._gather(data, rows, True)

    def store(self, data, rows, work, dim, ids, step):
        K.scatter(np.ascontiguousarray(work), data, data.view(np.int32), self.pool.arena.array,
                  np.asarray(rows, np.int64), *self._args())

    def portable(self, data, rows, dim):
        out = np.empty((len(rows), (1 + self.a) * self.dim + self.b + 2 * self.C), np.float32)
        K.portable(data, data.view(np.int32), self.pool.arena.array, np.asarray(rows, np.int64), *self._args(), out)
        return out

    def push_block(self, data, rows, grads, update, at, backup, dim, ids, step):
        """``RowFormat.push_block`` in place, as fp32's: the update's kernel (``optim/base.py``'s
        ``Update``) runs on a tile of working rows at a time (``chunk_kernels.update_in_place``), with
        no decoded copy of the block and no second pass to store it or check it."""
        bad, _ = K.update_in_place(data, data.view(np.int32), self.pool.arena.array, np.asarray(rows, np.int64),
                                   grads, update.counts_at(at), update.kernel, update.hyper, backup, self._tile,
                                   self._order, *self._args())
        return bad

    def from_working(self, work, ids, step, dim):
        """New rows hold their first ``start`` chunks; the others' columns read zeros."""
        n, C = len(work), self.C
        live = np.broadcast_to((np.arange(C) < self.start).astype(np.float32), (n, C))
        out = np.hstack([work, np.zeros((n, C), np.float32), live])
        out[:, self._columns(range(self.start, C))] = 0
        return out

    def mask_new(self, grads):
        grads[:, self.start * self.s:self.C * self.s] = 0

    def _columns(self, chunks) -> list[int]:
        """The working columns of ``chunks``: their values, then their slice of each state block."""
        return [e * self.dim + k * self.s + j for e in range(1 + self.a) for k in chunks for j in range(self.s)]

    def place(self, data, rows, portable, dim):
        rows = np.asarray(rows, np.int64)
        self.release(data, rows)
        chunks = self.pool.alloc(int(np.count_nonzero(portable[:, -self.C:])))
        placed = K.place(np.ascontiguousarray(portable, np.float32), data, data.view(np.int32), self.pool.arena.array,
                         rows, chunks, *self._args())
        assert placed == len(chunks)

    def release(self, data, rows):
        handles = data.view(np.int32)[:, :self.C]
        held = handles[rows]
        self.pool.free(held[held != 0].astype(np.int64) - 1)
        handles[rows] = 0

    def on_push(self, data, rows, grads, dim):
        K.observe(data, data.view(np.int32), np.asarray(rows, np.int64), grads, self.C, self.s)

    def check_rows(self, data, n):
        handles = data.view(np.int32)[:n, :self.C]
        held = handles[handles != 0].astype(np.int64) - 1
        assert (handles[:, 0] != 0).all(), "a row lost its first chunk"
        assert len(held) == self.pool.live, "the pool's live chunk count disagrees with the rows' handles"
        assert ((held >= 0) & (held < self.pool.used)).all(), "a handle points past the pool"
        free = self.pool._free[:self.pool.n_free]
        assert len(np.unique(np.concatenate([held, free]))) == len(held) + len(free), \
            "a chunk is held twice, or held and free"

    def adjust(self, data, n, dim) -> dict:
        """The periodic pass over rows [0, n): choose the live chunks, compact the pool, decay the
        utilities. Returns {"live", "freed", "revived"}: chunks held after, chunks freed, chunks
        that came back (zeros)."""
        C, bits = self.C, data.view(np.int32)
        util = np.ascontiguousarray(data[:n, C:2 * C])
        pmin = np.empty_like(util)
        K.prefix_min(util, pmin)
        live = np.ones((n, C), np.bool_)
        spare = max(math.floor(self.target * C * n) - n, 0)  # the chunks past each row's first the target allows
        rest = pmin[:, 1:]
        if spare < rest.size:  # live: a prefix-min above the (spare + 1)-th largest (a tie is in or out whole)
            cut = np.partition(rest.ravel(), rest.size - 1 - spare)[rest.size - 1 - spare]
            live[:, 1:] = rest > cut
        held = bits[:n, :C] != 0
        freed, revived = int((held & ~live).sum()), int((live & ~held).sum())
        total = int(live.sum())
        arena = Arena(np.float32, (self.pool.words,), capacity=max(total, 1))
        assert K.compact(bits, self.pool.arena.array, arena.array, live) == total
        self.pool.replace(arena, total)
        data[:n, C:2 * C] *= DECAY
        return {"live": total, "freed": freed, "revived": revived}
