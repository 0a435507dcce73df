"""``CompiledPooling``: pooling of pulled rows into bags with numba kernels, on CPU tensors.

    pooled[b] = sum (or mean) of rows[inverse[k]] for k in offsets[b] .. offsets[b+1]
    grad_rows[u] = sum over k with inverse[k] == u of grad_pooled[bag of k] (/ bag size)

``F.embedding_bag`` computes the same, but its backward for a dense weight sorts the
indices and costs several times the forward; here backward is one pass over the ids, in a
fixed order (so bitwise deterministic), producing the (U, dim) gradient that is pushed.
(Grouping the ids by row first, a counting sort, then gathering each row's uses was tried: on
Zipf ids it costs 3x the pass, whose adds land on hot rows already in cache.)

Both run on the kernel threads (``cardinal/parallel.py``), with the same bits for any thread
count: forward splits the bags (each bag is summed by one thread), backward splits the rows
(each row's uses are added by one thread, in increasing position).
"""

import numba as nb
import numpy as np
import torch

from cardinal import parallel
from cardinal.embedding.hashing import U64
from cardinal.worker.pooling.base import Pooling

PARALLEL_MIN = 8192  # ids per thread below which pooling stays on one thread (benchmarks/worker_path.py)


@nb.njit(inline="always")
def owner(r, n_parts):
    """The thread that owns row r: rows scattered by a multiplicative hash (first-occurrence
    order puts hot rows first, so contiguous ranges would not balance), without a division."""
    h = (U64(r) * U64(0x9E3779B97F4A7C15)) >> U64(32)
    return np.int64((h * U64(n_parts)) >> U64(32))


@nb.njit(nogil=True, cache=True)
def pool_forward(rows, inverse, offsets, n_fields, mean, out, bag_lo, bag_hi):
    """rows (U, d) float32, inverse (nnz,) int64, offsets (n_fields * B + 1,) int64 -> out (B * n_fields, d),
    for bags bag_lo .. bag_hi - 1 only (threads take disjoint bag ranges; each bag is one thread's).

    Bag f * B + i (field f, example i) lands in out[i * n_fields + f], so ``out`` reshaped to
    (B, n_fields, d) is the stacked per-field embeddings with no copy. A bag's first row is
    written as 0 + row (the bits of zeroing and adding, -0.0 included) and the rest added to it:
    zeroing ``out`` first and adding every row cost 2.2x as much over uniform ids (a store, then a
    load of it), about the same over Zipf ids, whose rows are in cache.
    """
    d = rows.shape[1]
    if bag_hi <= bag_lo:
        return
    zero = np.float32(0.0)
    batch = (offsets.shape[0] - 1) // n_fields
    f, i = bag_lo // batch, bag_lo % batch  # bag b = f * batch + i, counted up without a division per bag
    for b in range(bag_lo, bag_hi):
        o = i * n_fields + f
        i += 1
        if i == batch:
            f, i = f + 1, 0
        lo, hi = offsets[b], offsets[b + 1]
        if hi == lo:
            for j in range(d):
                out[o, j] = zero
            continue
        r = inverse[lo]
        for j in range(d):
            out[o, j] = zero + rows[r, j]
        for k in range(lo + 1, hi):
            r = inverse[k]
            for j in range(d):
                out[o, j] += rows[r, j]
        if mean:
            scale = np.float32(1.0) / np.float32(hi - lo)
            for j in range(d):
                out[o, j] *= scale


@nb.njit(nogil=True, cache=True)
def pool_backward(grad_out, inverse, offsets, n_fields, mean, grad_rows, part, n_parts):
    """grad_out (B * n_fields, d), laid out as pool_forward's out -> grad_rows (U, d), zeroed by the caller;
    only the rows r that ``owner(r, n_parts) == part`` (threads own disjoint rows).

    Every thread walks all uses k in increasing order and adds the ones of its rows, so each
    row's sum is added in increasing k whatever n_parts: the same bits as one thread.
    """
    d = grad_out.shape[1]
    batch = (offsets.shape[0] - 1) // n_fields
    f, i = 0, 0  # bag b = f * batch + i, counted up without a division per bag
    for b in range(offsets.shape[0] - 1):
        o = i * n_fields + f
        i += 1
        if i == batch:
            f, i = f + 1, 0
        lo, hi = offsets[b], offsets[b + 1]
        scale = np.float32(1.0) / np.float32(hi - lo) if mean and hi > lo else np.float32(1.0)
        for k in range(lo, hi):
            r = inverse[k]
            if n_parts > 1 and owner(r, n_parts) != part:
                continue
            for j in range(d):
                grad_rows[r, j] += grad_out[o, j] * scale


def forward(rows: np.ndarray, inverse: np.ndarray, offsets: np.ndarray, n_fields: int, mean: bool) -> np.ndarray:
    """(B * n_fields, d) pooled bags, split by bag ranges over the kernel threads.

    The kernel writes every value, yet ``out`` is zeroed first: in a training step its lines are
    cold, and the kernel's writes land one bag of a field after another, 26 rows apart in the
    default recipe, each on a line it must first fetch; one sequential pass brings them in at the
    prefetcher's pace. A forward at batch 1024 in the default recipe's step: 0.28-0.47 ms against
    0.63-0.79 with ``np.empty`` (docs/performance.md)."""
    n_bags = len(offsets) - 1
    out = np.zeros((n_bags, rows.shape[1]), np.float32)
    parallel.over_parts(len(inverse), lambda i, k: pool_forward(rows, inverse, offsets, n_fields, mean, out,
                                                                 n_bags * i // k, n_bags * (i + 1) // k),
                        PARALLEL_MIN)
    return out


def backward(grad: np.ndarray, inverse: np.ndarray, offsets: np.ndarray, n_fields: int, mean: bool,
             n_rows: int) -> np.ndarray:
    """(n_rows, d) gradient of the pulled rows, split by rows over the kernel threads."""
    grad_rows = np.zeros((n_rows, grad.shape[1]), np.float32)
    parallel.over_parts(len(inverse), lambda i, k: pool_backward(grad, inverse, offsets, n_fields, mean,
                                                                  grad_rows, i, k), PARALLEL_MIN)
    return grad_rows


class BagPool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows: torch.Tensor, inverse: np.ndarray, offsets: np.ndarray, n_fields: int,
                mean: bool) -> torch.Tensor:
        out = forward(rows.detach().numpy(), inverse, offsets, n_fields, mean)
        ctx.inverse, ctx.offsets, ctx.n_fields, ctx.mean, ctx.n_rows = inverse, offsets, n_fields, mean, rows.shape[0]
        return torch.from_numpy(out).view(-1, n_fields, rows.shape[1])

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        grad = np.ascontiguousarray(grad_out.reshape(-1, grad_out.shape[-1]).numpy())
        grad_rows = backward(grad, ctx.inverse, ctx.offsets, ctx.n_fields, ctx.mean, ctx.n_rows)
        return torch.from_numpy(grad_rows), None, None, None, None


class CompiledPooling(Pooling):
    """Today's strategy: the kernels above (``.numpy()`` on the rows, so CPU tensors only)."""

    def pool(self, rows: torch.Tensor, inverse: np.ndarray, offsets: np.ndarray, n_fields: int,
             mean: bool) -> torch.Tensor:
        return BagPool.apply(rows, inverse, offsets, n_fields, mean)


def bag_pool(rows: torch.Tensor, inverse: np.ndarray, offsets: np.ndarray, n_fields: int, mode: str) -> torch.Tensor:
    """Pool ``rows`` (U, dim) into bags: n_fields fields of B examples each, laid out field-major
    in ``offsets``; returns (B, n_fields, dim). Differentiable in ``rows``."""
    return BagPool.apply(rows, inverse, offsets, n_fields, mode == "mean")
