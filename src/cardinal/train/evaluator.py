"""Evaluation, and keeping the best model a run has seen, apart from the loop (``trainer.py``)
that says when.

Evaluation every ``eval.every`` steps (counted over epochs, and on from a resume), and at
the end. Each evaluation that improves on the best (``train/best.py``) is checkpointed and kept
beside the newest checkpoints; ``eval.early_stop`` ends the run once ``eval.patience``
evaluations in a row have not improved (``callbacks.EarlyStopping``). The summary's headline
eval_auc / eval_logloss are the best kept model's; last_eval_* are the last step's.
With ``train.baseline = "lr"`` (``baseline.py``) logistic regression trains beside the model on
the same batches and every evaluation reports it (baseline_lr_auc, baseline_lr_logloss).

Each worker scores its share of the eval batches and the results are gathered, so every worker
judges the same metrics; an empty split or a non-finite metric stops the run with what to change.
"""

import math

import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import binary_auroc
from tqdm import tqdm

from cardinal.train.best import Best


class Evaluator:
    def __init__(self, trainer):
        self.trainer = trainer
        ev = trainer.recipe.eval
        self.best = Best("logloss" if ev.early_stop == "logloss" else "auc", ev.min_delta)

    def evaluate(self) -> dict:
        """AUC and logloss on the eval split, with lookup-only pulls (nothing is created)."""
        with self.trainer.meter.excluded():
            return self._evaluate()

    def _evaluate(self) -> dict:
        tr = self.trainer
        tr._flush()
        tr.workers.barrier()  # every worker's pushes are applied before anyone reads rows
        for m in tr._modules():
            m.eval()
        logits, labels, baseline = [], [], []
        w = tr.workers
        with torch.no_grad():
            for i, batch in enumerate(tr.eval_data):
                if i % w.world != w.rank:
                    continue
                emb, wide = tr._embed(batch)
                logits.append(tr.model(tr._inputs(batch)[0], emb, wide).cpu())
                labels.append(batch.labels)
                if tr.baseline is not None:
                    baseline.append(tr.baseline.logits(batch).cpu())
        for m in tr._modules():
            m.train()
        empty = torch.zeros(0)
        logit, label = w.gather(torch.cat(logits or [empty])), w.gather(torch.cat(labels or [empty]))
        files = ", ".join(map(str, tr.data_info["eval_files"])) or "none"
        if len(label) == 0:
            raise ValueError(f"the eval split is empty: no good rows in {files}")
        if label.min() == label.max():
            raise ValueError(f"the eval split holds only labels {int(label[0])} ({len(label)} rows of {files}): "
                             f"AUC is undefined")
        result = {"eval_auc": float(binary_auroc(logit, label.long())),
                  "eval_logloss": float(F.binary_cross_entropy_with_logits(logit, label)), "eval_rows": len(label)}
        for name in ("eval_auc", "eval_logloss"):
            if not math.isfinite(result[name]):
                raise ValueError(f"{name} is {result[name]} at step {tr.step}: the model's predictions are not "
                                 f"finite; lower dense_optimizer.lr or sparse_optimizer.lr")
        if tr.baseline is not None:
            b = w.gather(torch.cat(baseline or [empty]))
            result["baseline_lr_auc"] = float(binary_auroc(b, label.long()))
            result["baseline_lr_logloss"] = float(F.binary_cross_entropy_with_logits(b, label))
        return result

    def _log_eval(self) -> dict:
        tr = self.trainer
        result = tr.evaluate()  # the trainer's: benchmarks/e2e.py times it apart
        if tr.workers.leader:
            tr.metrics.write({"step": tr.step, **result})
        if tr.progress:
            tqdm.write(f"step {tr.step}: AUC {result['eval_auc']:.4f}, logloss {result['eval_logloss']:.4f}")
        return result

    def eval_and_keep(self, batch) -> dict:
        """Evaluate; checkpoint the model when it is the best yet (``batch``: the step's own, for
        the finiteness check before saving); then the callbacks (early stopping among them)."""
        tr, best = self.trainer, self.best
        result = self._log_eval()
        if best.evaluated != tr.step:  # a resume that trains nothing judges no evaluation twice
            best.evaluated = tr.step
            if best.update(tr.step, result) and tr.recipe.eval.keep_best:
                if tr.checkpoints.saved == tr.step:
                    tr.checkpoints.mark_best()  # saved already (its checkpoint records the judging before this one)
                elif batch is not None:
                    tr.checkpoints.check_before_save(batch)
                    tr.save()  # the trainer's, as the loop's saves (timed apart by benchmarks/e2e.py)
        for callback in tr.callbacks:
            callback.on_eval(tr, tr.step, result)
        return result

    def resumed(self) -> tuple[int, dict] | None:
        """On a resume: a run that had stopped early stays stopped, and a step a signal saved at an
        evaluation's step, unevaluated, is evaluated now: (step, result), else None."""
        tr, ev, best = self.trainer, self.trainer.recipe.eval, self.best
        if ev.early_stop != "none" and best.since >= ev.patience:
            tr.stop(f"the run had stopped early: eval {best.metric} did not improve for {best.since} "
                    f"evaluations after step {best.step}; resume with a larger eval.patience to go on")
        if tr.stop_reason is None and ev.every and tr.step and tr.step % ev.every == 0 \
                and best.evaluated != tr.step:  # a signal at an evaluation's step saved it unevaluated
            return tr.step, self.eval_and_keep(None)
        return None
