"""The `lr` baseline trained beside a run's model, so every summary says what the model adds.

Logistic regression (``models/lr.py``) on the same batches, with weights of its own: tables
``lr_<name>`` of one weight per id on the same servers (their own rows, pulled and pushed as
the model's are, with the same sparse optimizer) and a dense layer with its own optimizer.
It starts from what a run of ``model.name = "lr"`` starts from (rows depend only on the seed
and the id; the dense layer is drawn from ``train.seed`` on a forked generator, leaving the
model's draws as they were), so it trains what that run trains.

    step t:  model:     pull rows -> forward -> backward -> push      (trainer.py)
             baseline:  pull lr_ rows -> forward -> backward -> push  (this file)
"""

import torch
import torch.nn.functional as F

from cardinal.models import MODELS
from cardinal.train import tables
from cardinal.worker import EmbeddingCollection
from cardinal.worker.clip import CowClip
from cardinal.worker.device import host_value


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
                                             staging=trainer.staging)
        self.optimizer = type(trainer.optimizer)(self.model.parameters(), **trainer.optimizer.defaults)

    def _wide(self, sparse) -> torch.Tensor:
        return self.embedding.stacked(sparse).squeeze(-1)  # (B, fields): a view, whose backward fills no zeros

    def train_step(self, batch, n: float, upcoming, step: int) -> float:
        """One step of the baseline on the model's batch (``n``: the global batch's examples)."""
        self.embedding.step = step
        self.trainer.schedule.apply(self.optimizer, step)  # the dense warmup and decay an `lr` run follows
        wide = self._wide(batch.sparse)
        if upcoming is not None:
            self.embedding.prefetch(upcoming.sparse, step + 1)
        dense, labels = self.trainer._inputs(batch)  # where the model runs (worker/device.py)
        logits = self.net(dense, None, wide)
        if self.trainer.workers.world == 1:
            loss = F.binary_cross_entropy_with_logits(logits, labels)
        else:
            loss = F.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / n
        loss_value = host_value(loss)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.embedding.stage_ahead()
        return loss_value()

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
        self.optimizer.load_state_dict(dense["baseline_optimizer"])
        for group, defaults in zip(self.optimizer.param_groups, self.trainer.optimizer.param_groups):
            group["lr"], group["weight_decay"] = defaults["lr"], defaults["weight_decay"]
