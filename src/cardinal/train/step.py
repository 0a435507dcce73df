"""One training step of a worker, apart from the loop (``trainer.py``) that decides which steps
run and what happens between them.

One step: pooled embeddings for the batch (pulled ahead in async mode, see
``EmbeddingCollection``), the next batch's pulls sent, forward, backward (gradient rows
pushed from the hooks), dense optimizer step (all-reduced among workers by DDP).

On a GPU (``train.device``, ``worker/device.py``): the dense model, pooling and the loss run on
the device; dedup and the servers stay on the host; each step's unique rows, inverse index,
offsets, dense features and labels are staged onto it (pinned buffers, non-blocking copies on
a side stream); when the next batch is pulled ahead (async mode), its copies start while this
step's work runs. DDP goes over nccl there, over gloo on the CPU; the recipe is the same.

With the `lr` baseline (``baseline.py``) its pulls are sent beside the model's, its loss is added
to the model's and one backward computes both (their graphs share nothing, so each gradient is
what its own backward gives, bitwise) and sends both collections' pushes.

``Stepper`` runs on the trainer's parts (model, embedding, optimizer, schedule, baseline), so
it holds the trainer, as ``Baseline`` does.
"""

import math
import time

import torch
import torch.nn.functional as F

from cardinal.models import dropout_seed
from cardinal.models.projection import Projected
from cardinal.worker.device import DeviceBatches, host_value


class Stepper:
    def __init__(self, trainer):
        self.trainer = trainer
        self.feed = DeviceBatches(trainer.staging) if trainer.staging is not None else None
        self._fed = None  # (batch, dense, labels) of the newest batch on the device

    def embed(self, batch):
        """The model's embedding input (and wide input) of ``batch``."""
        tr = self.trainer
        if isinstance(tr.model, Projected):  # tables of several dims: their fields' values side by side
            return tr.embedding.split(batch.sparse, tr.model.dims, tr.model.uses_wide)
        rows = tr.embedding.stacked(batch.sparse)  # (B, fields, dim [+ 1]), or (B, fields, 1) for `lr`
        dim = tr.recipe.embedding.dim if tr.model.uses_embedding else 0
        if not tr.model.uses_wide:
            return (rows if rows.shape[-1] == dim else rows[..., :dim]), None
        # split and squeeze, not slices: the backward is one cat of the parts' gradients, where each
        # slice's is a zero-filled (B, fields, dim + 1) tensor, copied into and summed (the same bits)
        values, wide = rows.split([dim, 1], -1)
        return values, wide.squeeze(-1)

    def inputs(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(dense, labels) of ``batch`` where the model runs (as they are on the CPU path)."""
        if self.feed is None:
            return batch.dense, batch.labels
        if self._fed is None or self._fed[0] is not batch:
            self._fed = (batch, *self.feed.get(batch))
        return self._fed[1], self._fed[2]

    def train(self, batch, n: float, upcoming) -> float:
        """Train on ``batch`` (``n``: the global batch's examples); ``upcoming``, when not None, is
        the next batch, whose pulls (and copies to the device) overlap this step."""
        tr, baseline = self.trainer, self.trainer.baseline
        tr.embedding.step = tr.step
        tr.schedule.apply(tr.optimizer, tr.step)  # dense warmup and decay (train/schedule.py)
        if tr.model_seeds:  # dropout masks drawn from (seed, step, worker): a resumed run draws the same
            torch.manual_seed(dropout_seed(tr.recipe.train.seed, tr.step, tr.workers.rank))
        tr.meter.steps += 1
        if baseline is not None:  # its pulls go out right after the model's (train/baseline.py)
            if not tr.embedding.pulling(batch.sparse):
                tr.embedding.prefetch(batch.sparse, tr.step)
            self._timed(baseline.begin, batch, tr.step)
        dense, labels = self.inputs(batch)
        emb, wide = self.embed(batch)
        baseline_wide = None if baseline is None else self._timed(baseline.wide, batch)
        if upcoming is not None:
            tr.embedding.prefetch(upcoming.sparse, tr.step + 1)
            if baseline is not None:
                self._timed(baseline.prefetch, upcoming, tr.step + 1)
            if self.feed is not None:
                self.feed.stage(upcoming)  # its dense features and labels cross while this step runs
        start, apart = time.perf_counter(), tr.timings.get("baseline", 0.0)
        # the baseline's graph first: backward runs the newer graph, the model's, first, so the model's
        # pushes leave before the baseline's, as when each had a backward of its own
        baseline_loss = None if baseline is None else self._timed(baseline.loss, batch, baseline_wide, n)
        logits = tr.net(dense, emb, wide)
        if tr.workers.world == 1:
            loss = F.binary_cross_entropy_with_logits(logits, labels)
        else:  # this share's part of the global batch's mean loss (n examples); DDP sums the parts' gradients
            loss = F.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / n
        loss_value = host_value(loss)  # on CUDA read after the pushes' sync: no wait of its own
        tr.optimizer.zero_grad(set_to_none=True)
        total = loss
        if baseline is not None:  # one backward: both collections' pushes leave together
            baseline.optimizer.zero_grad(set_to_none=True)
            total = loss + baseline_loss
        total.backward()
        tr.optimizer.step()
        tr.embedding.stage_ahead()  # the next batch's rows cross while the optimizer step runs
        if baseline is not None:
            self._timed(baseline.step)
        tr.timings["compute"] += time.perf_counter() - start - (tr.timings.get("baseline", 0.0) - apart)
        return loss_value()

    def _timed(self, fn, *args):
        """``fn(*args)``, its seconds added to the trainer's "baseline" timing."""
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.trainer.timings["baseline"] = self.trainer.timings.get("baseline", 0.0) + time.perf_counter() - start

    def check_loss(self, loss: float) -> None:
        """Stop at the first step whose loss is not finite (on any worker), before it is saved."""
        tr = self.trainer
        bad = not math.isfinite(loss)
        if tr.workers.world > 1:
            (bad,) = tr.workers.sum(float(bad))
        if bad:
            raise ValueError(f"the loss at step {tr.step} is {loss} (training diverged); "
                             f"{tr.checkpoints.last_checkpoint()}. Lower dense_optimizer.lr or sparse_optimizer.lr")
