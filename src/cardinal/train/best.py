"""The best evaluation a run has seen: how the trainer judges which checkpoint to keep as the best.

Plain CTR models overfit from their second epoch, so the newest checkpoint is often not the
best one. The trainer judges every evaluation by one metric (``eval.early_stop``, AUC when
that is "none"), checkpoints the model at each evaluation that improves on the best by more
than ``eval.min_delta``, and keeps that checkpoint beside the newest ones:

    checkpoints/step-0000000300/      the best (protected from keep_checkpoints)
    checkpoints/step-0000000450/      the newest
    checkpoints/best.json             names the best (``checkpoint/best.py``)

``Best.state()`` travels in every checkpoint's commit marker (``extra["best"]``), so a resumed
run goes on judging, and counting evaluations without improvement, where it left off.
"""

from dataclasses import dataclass, field


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
