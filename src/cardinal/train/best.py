"""The best evaluation a run has seen, and the marker that names its checkpoint.

Plain CTR models overfit from their second epoch, so the newest checkpoint is often not the
best one. The trainer judges every evaluation by one metric (``train.early_stop``, AUC when
that is "none"), checkpoints the model at each evaluation that improves on the best by more
than ``train.min_delta``, and keeps that checkpoint beside the newest ones:

    checkpoints/step-0000000300/      the best (protected from keep_checkpoints)
    checkpoints/step-0000000450/      the newest
    checkpoints/best.json             {"step": 300, "checkpoint": "step-0000000300", "metric": "auc",
                                       "eval_auc": 0.79, "eval_logloss": 0.45}

``Best.state()`` travels in every checkpoint's commit marker (``extra["best"]``), so a resumed
run goes on judging, and counting evaluations without improvement, where it left off.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path

from cardinal.durable import read_json, write_json
from cardinal.ps import checkpoint

MARKER = "best.json"


@dataclass
class Best:
    metric: str = "auc"           # "auc" (higher is better) or "logloss" (lower is better)
    min_delta: float = 0.0
    step: int | None = None       # the best evaluation's step
    result: dict = field(default_factory=dict)  # its eval_auc, eval_logloss, ...
    since: int = 0                # evaluations after it that did not improve on it
    evaluated: int | None = None  # the step of the latest evaluation judged

    @property
    def value(self) -> float | None:
        return self.result.get(f"eval_{self.metric}")

    def improves(self, result: dict) -> bool:
        new = result[f"eval_{self.metric}"]
        if self.step is None:
            return True
        gain = new - self.value if self.metric == "auc" else self.value - new
        return gain > self.min_delta

    def update(self, step: int, result: dict) -> bool:
        """Record an evaluation; True when it is the new best."""
        if self.improves(result):
            self.step, self.result, self.since = step, dict(result), 0
            return True
        self.since += 1
        return False

    def state(self) -> dict:
        return {"step": self.step, "result": self.result, "since": self.since, "metric": self.metric,
                "evaluated": self.evaluated}

    def restore(self, state: dict | None) -> None:
        """Go on from a checkpoint's state; one judged by another metric starts afresh."""
        if not state or state.get("metric") != self.metric or state.get("step") is None:
            return
        self.step, self.result, self.since = int(state["step"]), dict(state["result"]), int(state["since"])
        self.evaluated = state.get("evaluated")


def write_marker(root: Path, best: Best) -> None:
    """Name the best checkpoint (written after that checkpoint is committed)."""
    write_json(root / MARKER, {"step": best.step, "checkpoint": checkpoint.step_dir(root, best.step).name,
                               "metric": best.metric, **{k: v for k, v in best.result.items()
                                                         if isinstance(v, (int, float)) and math.isfinite(v)}})


def best_checkpoint(root: Path) -> Path | None:
    """The committed checkpoint ``best.json`` names, or None (no marker, or its checkpoint is gone)."""
    marker = root / MARKER
    if not marker.is_file():
        return None
    step = read_json(marker).get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError(f"{marker}: 'step' must be an integer, got {step!r}")
    path = checkpoint.step_dir(root, step)
    return path if (path / checkpoint.COMMIT).is_file() else None
