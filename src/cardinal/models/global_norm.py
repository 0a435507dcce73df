"""``GlobalBatchNorm``: batch normalisation of input features over the global batch.

With several workers each training a share of one global batch, a plain ``BatchNorm1d`` would
normalise each share by its own statistics, and W workers would train another model than one
process. Here the per-feature sums, sums of squares and counts of the shares are all-reduced
(one small collective), so every worker normalises by the global batch's mean and variance and
updates the same running statistics. ``torch.nn.SyncBatchNorm`` does this on GPUs only; this
one all-reduces on whichever device ``x`` lives (gloo on the CPU, nccl on CUDA).

For input features (data, which need no gradient): no gradient flows back to the input through
the statistics. Alone, or in eval mode, it is ``BatchNorm1d`` exactly; its state is the same.
A global batch of one example has no batch statistics: it is normalised by the running ones
(as in eval mode, which leaves them unchanged) instead of failing, so a data set whose last
batch holds one line trains to its end.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class GlobalBatchNorm(nn.BatchNorm1d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return self._by_running_statistics(x) if self.training and len(x) == 1 else super().forward(x)
        if x.requires_grad:
            raise NotImplementedError("GlobalBatchNorm normalises input features; its input must not need a gradient")
        wide = x.double()
        count = wide.new_full((1,), float(len(x)))  # a fill: torch.tensor([n], device=cuda) would copy and sync
        stats = torch.cat([wide.sum(0), (wide * wide).sum(0), count])
        dist.all_reduce(stats)
        c, n = x.shape[1], stats[-1]
        # No `if n < 2` on the host: on CUDA that reads n back, a sync in every forward. Both
        # outcomes are computed and the global count picks one on the device (bitwise either way).
        batch = n >= 2
        by_running = self._by_running_statistics(x, copy=True)  # its backward keeps them; they change below
        mean = stats[:c] / n
        var = (stats[c:2 * c] / n - mean * mean).clamp_min(0)
        with torch.no_grad():
            self.num_batches_tracked += batch.long()
            m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
            running_mean = self.running_mean.mul(1 - m).add_((m * mean).float())
            running_var = self.running_var.mul(1 - m).add_((m * var * n / (n - 1)).float())
            self.running_mean.copy_(torch.where(batch, running_mean, self.running_mean))
            self.running_var.copy_(torch.where(batch, running_var, self.running_var))
        return torch.where(batch, (x - mean.float()) * torch.rsqrt(var.float() + self.eps) * self.weight + self.bias,
                           by_running)

    def _by_running_statistics(self, x: torch.Tensor, copy: bool = False) -> torch.Tensor:
        mean, var = self.running_mean, self.running_var
        if copy:
            mean, var = mean.clone(), var.clone()
        return F.batch_norm(x, mean, var, self.weight, self.bias, False, 0.0, self.eps)
