"""``CompiledPooling``: pooling of pulled rows into bags with numba kernels, on CPU tensors.

    pooled[b] = sum (or mean) of rows[inverse[k]] for k in offsets[b] .. offsets[b+1]
    grad_rows[u] = sum over k with inverse[k] == u of grad_pooled[bag of k] (/ bag size)

``F.embedding_bag`` computes the same, but its backward for a dense weight sorts the
indices and costs several times the forward; here backward is one pass over the ids, in a
fixed order (so bitwise deterministic), producing the (U, dim) gradient that is pushed.
"""

import numba as nb
import numpy as np
import torch

from cardinal.worker.pooling.base import Pooling


@nb.njit(nogil=True, cache=True)
def pool_forward(rows, inverse, offsets, n_fields, mean, out):
    """rows (U, d) float32, inverse (nnz,) int64, offsets (n_fields * B + 1,) int64 -> out (B * n_fields, d).

    Bag f * B + i (field f, example i) lands in out[i * n_fields + f], so ``out`` reshaped to
    (B, n_fields, d) is the stacked per-field embeddings with no copy.
    """
    d = rows.shape[1]
    batch = (offsets.shape[0] - 1) // n_fields
    for b in range(offsets.shape[0] - 1):
        o = (b % batch) * n_fields + b // batch
        lo, hi = offsets[b], offsets[b + 1]
        for j in range(d):
            out[o, j] = 0.0
        for k in range(lo, hi):
            r = inverse[k]
            for j in range(d):
                out[o, j] += rows[r, j]
        if mean and hi > lo:
            scale = np.float32(1.0) / np.float32(hi - lo)
            for j in range(d):
                out[o, j] *= scale


@nb.njit(nogil=True, cache=True)
def pool_backward(grad_out, inverse, offsets, n_fields, mean, grad_rows):
    """grad_out (B * n_fields, d), laid out as pool_forward's out -> grad_rows (U, d), zeroed by the caller."""
    d = grad_out.shape[1]
    batch = (offsets.shape[0] - 1) // n_fields
    for b in range(offsets.shape[0] - 1):
        o = (b % batch) * n_fields + b // batch
        lo, hi = offsets[b], offsets[b + 1]
        scale = np.float32(1.0) / np.float32(hi - lo) if mean and hi > lo else np.float32(1.0)
        for k in range(lo, hi):
            r = inverse[k]
            for j in range(d):
                grad_rows[r, j] += grad_out[o, j] * scale


class BagPool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows: torch.Tensor, inverse: np.ndarray, offsets: np.ndarray, n_fields: int,
                mean: bool) -> torch.Tensor:
        out = np.empty((len(offsets) - 1, rows.shape[1]), np.float32)
        pool_forward(rows.detach().numpy(), inverse, offsets, n_fields, mean, out)
        ctx.inverse, ctx.offsets, ctx.n_fields, ctx.mean, ctx.n_rows = inverse, offsets, n_fields, mean, rows.shape[0]
        return torch.from_numpy(out).view(-1, n_fields, rows.shape[1])

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        grad = np.ascontiguousarray(grad_out.reshape(-1, grad_out.shape[-1]).numpy())
        grad_rows = np.zeros((ctx.n_rows, grad.shape[1]), np.float32)
        pool_backward(grad, ctx.inverse, ctx.offsets, ctx.n_fields, ctx.mean, grad_rows)
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
