"""Hooks into the training loop, for code that watches or steers a run from Python.

    class PrintAUC(Callback):
        def on_eval(self, trainer, step, result):
            print(step, result["eval_auc"])

    Trainer(recipe, run_dir, callbacks=[PrintAUC()]).fit()

Every worker calls every hook, at the same points and with the same values (evaluation
results are gathered from all workers first), so a callback that stops the run
(``trainer.stop(reason)``) stops all workers at the same step; one that writes files should
do so only where ``trainer.workers.leader``. Early stopping is such a callback.
"""

from pathlib import Path


class Callback:
    """Override what you need; each hook does nothing by default."""

    def on_step(self, trainer, step: int, loss: float) -> None:
        """After each training step, with this worker's loss of the step's batch."""

    def on_eval(self, trainer, step: int, result: dict) -> None:
        """After each evaluation: ``result`` holds eval_auc, eval_logloss, eval_rows (and
        baseline_lr_auc, baseline_lr_logloss with train.baseline = "lr"); ``trainer.best`` is
        already updated with it."""

    def on_checkpoint(self, trainer, step: int, path: Path, best: bool) -> None:
        """After a checkpoint is committed; ``best`` when it is the run's new best model."""


class EarlyStopping(Callback):
    """Stop once ``patience`` evaluations in a row have not improved on the best one (by more than
    eval.min_delta, in eval.early_stop's metric): the run ends within patience of its best."""

    def __init__(self, patience: int):
        self.patience = patience

    def on_eval(self, trainer, step: int, result: dict) -> None:
        best = trainer.best
        if best.since >= self.patience and trainer.stop_reason is None:
            trainer.stop(f"early stop at step {step}: eval {best.metric} has not improved on step {best.step}'s "
                         f"{best.value:.4f} for {best.since} evaluations (eval.patience = {self.patience})")
