"""The `lr` baseline trained beside a run's model, so every summary says what the model adds.

Logistic regression (``models/lr.py``) on the same batches, with weights of its own: tables
``lr_<name>`` of one weight per id on the same servers (their own rows, pulled and pushed as
the model's are, with the same sparse optimizer) and a dense layer with its own optimizer.
It starts from what a run of ``model.name = "lr"`` starts from (rows depend only on the seed
and the id; the dense layer is drawn from ``train.seed`` on a forked generator, leaving the
model's draws as they were), so it trains what that run trains.

    step t:  send: pull rows, pull lr_ rows        (async: during step t-1, for the next batch)
             wait and pool each; forward: the baseline's graph, then the model's
             one backward over the sum of both losses: push rows, then push lr_ rows   (step.py)

Its collection reuses the model's de-duplication of each batch (``worker/layouts.py``); its pulls
are sent right after the model's, before either is waited on, and its pushes leave from the
model's backward, right after the model's: each shard sees the requests in the order it saw when
the baseline had a step of its own (a memory budget's evictions depend on that order). Nothing
else is shared, so every number is what it would be trained alone.
"""

import torch
import torch.nn.functional as F

from cardinal.models import MODELS
from cardinal.train import builder, tables
from cardinal.worker import EmbeddingCollection
from cardinal.worker.clip import CowClip


class Baseline:
    def __init__(self, trainer, source, n_dense: int):
        recipe = trainer.recipe
        self.trainer = trainer
        with torch.random.fork_rng():
            torch.manual_seed(recipe.train.seed)
            self.model = MODELS["lr"](n_dense, len(trainer.fields), recipe.embedding.dim).to(trainer.device)
        self.net = trainer.workers.wrap(self.model)
        self.embedding = EmbeddingCollection(source, tables.baseline_features(recipe), recipe.embedding.pooling,
                                             trainer.embedding.staleness, timeout=recipe.ps.timeout_s,
                                             clip=CowClip.from_config(recipe.embedding),  # as an `lr` run clips
                                             staging=trainer.staging, layouts=trainer.embedding.layouts)
        self.optimizer = type(trainer.optimizer)(self.model.parameters(), **trainer.optimizer.defaults)

    def _wide(self, sparse) -> torch.Tensor:
        return self.embedding.stacked(sparse).squeeze(-1)  # (B, fields): a view, whose backward fills no zeros

    def begin(self, batch, step: int) -> None:
        """Step ``step`` starts: its pulls sent (unless pulled ahead), after the model's, before either is waited on."""
        self.embedding.step = step
        self.trainer.schedule.apply(self.optimizer, step)  # the dense warmup and decay an `lr` run follows
        if not self.embedding.pulling(batch.sparse):
            self.embedding.prefetch(batch.sparse, step)

    def wide(self, batch) -> torch.Tensor:
        """This step's rows pooled (B, fields): taken before the next batch's pulls are sent."""
        return self._wide(batch.sparse)

    def prefetch(self, upcoming, step: int) -> None:
        """The next batch's pulls, sent beside the model's (its de-duplication is the model's)."""
        self.embedding.prefetch(upcoming.sparse, step)

    def loss(self, batch, wide: torch.Tensor, n: float) -> torch.Tensor:
        """The baseline's loss on the model's batch (``n``: the global batch's examples), to be summed with
        the model's for one backward: each loss's gradients are what its own backward would give, bitwise."""
        dense, labels = self.trainer._inputs(batch)  # where the model runs (worker/device.py)
        logits = self.net(dense, None, wide)
        if self.trainer.workers.world == 1:
            return F.binary_cross_entropy_with_logits(logits, labels)
        return F.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / n

    def step(self) -> None:
        """After the backward: the dense step, and the next batch's rows onto the device."""
        self.optimizer.step()
        self.embedding.stage_ahead()

    def logits(self, batch) -> torch.Tensor:
        """Eval-mode logits (the caller holds no_grad and has set eval mode, see ``modules``)."""
        return self.model(self.trainer._inputs(batch)[0], None, self._wide(batch.sparse))

    @property
    def modules(self):
        return (self.model, self.embedding)

    def flush(self) -> None:
        self.embedding.flush()

    def state(self) -> dict:
        return {"baseline_model": self.model.state_dict(), "baseline_optimizer": self.optimizer.state_dict()}

    def check_state(self, where, dense: dict) -> None:
        """The checkpoint holds this baseline's dense state (names, shapes): refused before loading."""
        saved = dense.get("baseline_model")
        if not isinstance(saved, dict) or not isinstance(dense.get("baseline_optimizer"), dict):
            raise ValueError(f"{where}: holds no state of the lr baseline (saved with train.baseline = \"none\"?); "
                             f"resume with train.baseline = \"none\"")
        expected = {k: tuple(v.shape) for k, v in self.model.state_dict().items()}
        if {k: tuple(v.shape) if isinstance(v, torch.Tensor) else None for k, v in saved.items()} != expected:
            raise ValueError(f"{where}: the lr baseline's parameters differ from this recipe's")

    def load_state(self, dense: dict) -> None:
        self.model.load_state_dict(dense["baseline_model"])
        builder.load_dense_state(self.optimizer, dense["baseline_optimizer"])
        for group, defaults in zip(self.optimizer.param_groups, self.trainer.optimizer.param_groups):
            group["lr"], group["weight_decay"] = defaults["lr"], defaults["weight_decay"]
