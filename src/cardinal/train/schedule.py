"""The dense learning rate by step: linear warmup from 0, then constant, cosine or linear decay.

    lr(step) = base * factor(step),  step = 1, 2, ... (the step being trained; step 0 trains nothing)

    warmup (step <= w):  factor = step / w                         (1/w, 2/w, ..., 1)
    then, p = (step - w) / (total - w) clipped to [0, 1]:
      "none":    1
      "linear":  1 - (1 - min_lr_ratio) * p                        (1 -> min_lr_ratio at total)
      "cosine":  min_lr_ratio + (1 - min_lr_ratio) * (1 + cos(pi p)) / 2

e.g. base 0.01, w = 2, "linear" to 0.1 over total = 6: 0.005 0.01 0.00775 0.0055 0.00325 0.001.

A pure function of the step, so a resumed run continues the schedule exactly: nothing is
saved beyond the step the checkpoint already holds (the trainer writes the lr into the
optimizer's parameter groups before each step, over whatever the checkpoint restored).
Decay needs the run's total steps (``train.steps``, or epochs x steps per epoch when the
data's size is known); a resumed run with another total follows the new total from its step.
Warmup eases the first steps on a freshly initialised MLP over large batches (Goyal et al.
2017); decay anneals a run towards its end.
"""

import math
from typing import TYPE_CHECKING

from cardinal.recipe.dense_optimizer import DECAYS

if TYPE_CHECKING:  # torch is not imported to read a recipe
    import torch


def lr_factor(step: int, warmup_steps: int = 0, decay: str = "none", min_lr_ratio: float = 0.0,
              total_steps: int | None = None) -> float:
    """The factor of the base lr at ``step`` (see the module docstring)."""
    if warmup_steps and step <= warmup_steps:
        return step / warmup_steps
    if decay == "none":
        return 1.0
    assert decay in DECAYS and total_steps is not None, (decay, total_steps)
    span = total_steps - warmup_steps
    p = min(1.0, max(0.0, (step - warmup_steps) / span)) if span > 0 else 1.0
    if decay == "linear":
        return 1.0 - (1.0 - min_lr_ratio) * p
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))


class DenseSchedule:
    """``dense_optimizer``'s warmup and decay over a run of ``total_steps`` (None: unknown)."""

    def __init__(self, config, base_lr: float, total_steps: int | None):
        self.warmup, self.decay, self.min_ratio = config.warmup_steps, config.decay, config.min_lr_ratio
        self.base, self.total = base_lr, total_steps
        if self.decay != "none" and not total_steps:
            raise ValueError(f"dense_optimizer.decay = {self.decay!r} needs the run's total steps, unknown for this "
                             "data: set train.steps, or dense_optimizer.decay = 'none'")

    @property
    def active(self) -> bool:
        return bool(self.warmup) or self.decay != "none"

    def lr(self, step: int) -> float:
        return self.base * lr_factor(step, self.warmup, self.decay, self.min_ratio, self.total)

    def apply(self, optimizer: "torch.optim.Optimizer", step: int) -> None:
        """Set every parameter group's lr for ``step``; with no warmup or decay, leave them as they are."""
        if self.active:
            lr = self.lr(step)
            for group in optimizer.param_groups:
                group["lr"] = lr
