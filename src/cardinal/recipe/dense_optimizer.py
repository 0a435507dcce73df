"""``[dense_optimizer]``: the worker side's torch.optim over the dense weights, and its schedule
(``train/schedule.py`` computes it; the names are here so a recipe loads without torch)."""

from dataclasses import dataclass, field

DENSE_OPTIMIZERS = {"adam": "Adam", "adagrad": "Adagrad", "sgd": "SGD"}
DECAYS = ("none", "cosine", "linear")


@dataclass(frozen=True)
class DenseOptimizerConfig:
    name: str = field(default="adam", metadata={"help": 'torch.optim: "adam", "adagrad" or "sgd" (fixed for a run)'})
    lr: float = field(default=0.001, metadata={"help": "the dense layers' learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "torch.optim's weight_decay on the dense weights"})
    lr_scaling: str = field(default="none", metadata={
        "help": '"sqrt": with data.batch_scope = "worker", lr x sqrt(workers) (CowClip\'s rule; the sparse lr '
                "stays); with a global batch the workers change nothing"})
    warmup_steps: int = field(default=0, metadata={
        "help": "lr rises linearly from 0 over these steps (train/schedule.py)..."})
    decay: str = field(default="none", metadata={
        "help": '...then "none", "cosine" or "linear" down to lr x min_lr_ratio at the run\'s last step'})
    min_lr_ratio: float = field(default=0.0, metadata={"help": "the decayed lr's floor, a share of lr"})

    def __post_init__(self):
        if self.name not in DENSE_OPTIMIZERS:
            raise ValueError(f"dense_optimizer.name must be one of {sorted(DENSE_OPTIMIZERS)}, got {self.name!r}")
        if not self.lr > 0:
            raise ValueError(f"dense_optimizer.lr must be > 0, got {self.lr}")
        if self.lr_scaling not in ("none", "sqrt"):
            raise ValueError(f"dense_optimizer.lr_scaling must be 'none' or 'sqrt', got {self.lr_scaling!r}")
        if self.warmup_steps < 0 or self.decay not in DECAYS or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"dense_optimizer: warmup_steps must be >= 0 (got {self.warmup_steps}), decay one of "
                             f"{DECAYS} (got {self.decay!r}), min_lr_ratio in [0, 1] (got {self.min_lr_ratio})")
