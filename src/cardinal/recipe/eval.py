"""``[eval]``: when a run evaluates, which evaluations count as better, and when it stops early."""

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EvalConfig:
    every: int = field(default=0, metadata={
        "help": "steps between evaluations, counted over epochs (0: at the end only)"})
    early_stop: str = field(default="auc", metadata={
        "help": 'stop when eval "auc" or "logloss" has not improved for `patience` evaluations; "none": never stop '
                "early (the best model is then judged by AUC)"})
    patience: int = field(default=3, metadata={"help": "evaluations without an improvement of more than min_delta"})
    min_delta: float = field(default=0.0, metadata={"help": "the least gain that counts as an improvement"})
    keep_best: bool = field(default=True, metadata={
        "help": "checkpoint at each evaluation that improves; kept beside the newest (checkpoints/best.json names "
                "it; eval and the summary use it)"})

    def __post_init__(self):
        if self.every < 0:
            raise ValueError(f"eval.every must be >= 0 (0: at the end only), got {self.every}")
        if self.early_stop not in ("auc", "logloss", "none"):
            raise ValueError(f"eval.early_stop must be 'auc', 'logloss' or 'none', got {self.early_stop!r}")
        if self.patience < 1:
            raise ValueError(f"eval.patience must be >= 1 (evaluations without improvement), got {self.patience}")
        if not (self.min_delta >= 0 and math.isfinite(self.min_delta)):
            raise ValueError(f"eval.min_delta must be a finite number >= 0, got {self.min_delta}")
