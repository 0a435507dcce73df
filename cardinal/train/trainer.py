"""The training loop of one worker on the embedded parameter server.

    trainer = Trainer(recipe, run_dir)
    summary = trainer.fit()                 # or fit(resume=True) to go on from the last checkpoint

One step: pooled embeddings for the batch (pulled ahead, see ``EmbeddingCollection``), the
next batch's pulls sent, forward, backward (gradient rows pushed from the hooks), dense
optimizer step.

A checkpoint is a barrier: pushes are flushed, and the batch after it is pulled only after
the save. So a run resumed from step k is bitwise equal, tables and dense weights, to a run
that saved at step k and went on. The checkpoint holds every shard, the dense model and
optimizer state, the step and the data position (epoch, batches read in it).
"""

import itertools
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import binary_auroc
from tqdm import tqdm

from cardinal.embedding import parallel
from cardinal.models import MODELS
from cardinal.ps import checkpoint, embedded
from cardinal.train import tables
from cardinal.train.config import DENSE_OPTIMIZERS, Recipe
from cardinal.train.readers import make_readers
from cardinal.train.report import MetricsLog, plot_curves
from cardinal.train.state_io import load_tree, save_tree
from cardinal.worker import EmbeddingCollection

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, recipe: Recipe, run_dir: str | Path, progress: bool = True):
        self.recipe, self.run_dir, self.progress = recipe, Path(run_dir), progress
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=1))
        t, e = recipe.train, recipe.embedding
        if t.kernel_threads:
            parallel.set_threads(t.kernel_threads)
        torch.manual_seed(t.seed)
        self.train_data, self.eval_data, self.data_info = make_readers(recipe.data, t.seed, progress)
        self.fields = list(self.train_data.sparse_fields)
        assert self.fields == tables.sparse_fields(recipe)
        model_spec = dict(recipe.model)
        model_cls = MODELS[model_spec.pop("name")]
        self.model = model_cls(len(self.train_data.dense_fields), len(self.fields), e.dim, **model_spec)

        self.client = embedded(tables.store_config(recipe), recipe.ps.shards, recipe.ps.concurrent)
        self.embedding = EmbeddingCollection(self.client, tables.features(recipe), e.pooling, e.max_in_flight)
        d = recipe.dense_optimizer
        self.optimizer = getattr(torch.optim, DENSE_OPTIMIZERS[d.name])(self.model.parameters(), lr=d.lr,
                                                                        weight_decay=d.weight_decay)
        self.metrics = MetricsLog(self.run_dir)
        self.step, self.epoch, self.batch_in_epoch = 0, 0, 0
        self.timings = {"data": 0.0, "compute": 0.0}

    # --- one step ------------------------------------------------------------------------

    def _embed(self, batch):
        rows = self.embedding.stacked(batch.sparse)  # (B, fields, dim [+ 1])
        dim = self.recipe.embedding.dim
        return rows[..., :dim], (rows[..., dim] if self.model.uses_wide else None)

    def _train_step(self, batch, upcoming) -> float:
        self.embedding.step = self.step
        emb, wide = self._embed(batch)
        if upcoming is not None:
            self.embedding.prefetch(upcoming.sparse, self.step + 1)
        start = time.perf_counter()
        loss = F.binary_cross_entropy_with_logits(self.model(batch.dense, emb, wide), batch.labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.timings["compute"] += time.perf_counter() - start
        return loss.item()

    # --- the loop ------------------------------------------------------------------------

    def fit(self, resume: bool = False) -> dict:
        t = self.recipe.train
        if resume:
            self.load(self.run_dir / "checkpoints")
        elif checkpoint.committed_steps(self.run_dir / "checkpoints"):
            raise ValueError(f"{self.run_dir} already holds checkpoints: resume it, or train into a new directory")
        per_epoch = self.data_info["train_steps"]
        total = t.steps or (per_epoch * t.epochs if per_epoch else None)
        bar = tqdm(total=total, initial=self.step, unit="step", disable=not self.progress, desc="training")
        train_time, samples, window, final = 0.0, 0, [], None
        last_saved = self.step if resume else None
        done = bool(t.steps and self.step >= t.steps)
        while self.epoch < t.epochs and not done:
            batches = itertools.islice(iter(self.train_data), self.batch_in_epoch, None)
            batch = self._next(batches)
            while batch is not None:
                start = time.perf_counter()
                self.step += 1
                last = t.steps and self.step >= t.steps
                save_due = t.checkpoint_every and self.step % t.checkpoint_every == 0
                upcoming = self._next(batches)
                prefetch = upcoming if self.recipe.embedding.prefetch and not save_due and not last else None
                loss = self._train_step(batch, prefetch)
                self.batch_in_epoch += 1
                train_time += time.perf_counter() - start
                samples += len(batch)
                window.append(loss)
                bar.update(1)
                if self.step % t.log_every == 0 or last:
                    rate = samples / train_time
                    self.metrics.write({"step": self.step, "epoch": self.epoch, "loss": float(np.mean(window)),
                                        "samples_per_s": rate, "time": time.time()})
                    bar.set_postfix(loss=f"{np.mean(window):.4f}", samples_per_s=f"{rate:,.0f}")
                    window = []
                if save_due:
                    last_saved = self.save()
                if t.eval_every and self.step % t.eval_every == 0:
                    final = (self.step, self._log_eval())
                if last:
                    done = True
                    break
                batch = upcoming
            if not done:
                self.epoch, self.batch_in_epoch = self.epoch + 1, 0
        bar.close()
        if last_saved != self.step:
            self.save()
        result = final[1] if final and final[0] == self.step else self._log_eval()
        return self._summary(result, samples, train_time)

    def _next(self, batches):
        start = time.perf_counter()
        batch = next(batches, None)
        self.timings["data"] += time.perf_counter() - start
        return batch

    # --- evaluation ----------------------------------------------------------------------

    def evaluate(self) -> dict:
        """AUC and logloss on the eval split, with lookup-only pulls (nothing is created)."""
        self.embedding.flush()
        for m in (self.model, self.embedding):
            m.eval()
        logits, labels = [], []
        with torch.no_grad():
            for batch in self.eval_data:
                emb, wide = self._embed(batch)
                logits.append(self.model(batch.dense, emb, wide))
                labels.append(batch.labels)
        for m in (self.model, self.embedding):
            m.train()
        logit, label = torch.cat(logits), torch.cat(labels)
        return {"eval_auc": float(binary_auroc(logit, label.long())),
                "eval_logloss": float(F.binary_cross_entropy_with_logits(logit, label)),
                "eval_rows": len(label)}

    def _log_eval(self) -> dict:
        result = self.evaluate()
        self.metrics.write({"step": self.step, **result})
        if self.progress:
            tqdm.write(f"step {self.step}: AUC {result['eval_auc']:.4f}, logloss {result['eval_logloss']:.4f}")
        return result

    # --- checkpoints ---------------------------------------------------------------------

    def save(self) -> int:
        self.embedding.flush()
        position = {"step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch}
        dense = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        self.client.save(self.run_dir / "checkpoints", self.step, keep=self.recipe.train.keep_checkpoints,
                         extra=position, before_commit=lambda path: save_tree(path / "dense", dense))
        return self.step

    def load(self, path: str | Path) -> dict:
        """Restore tables, dense state and data position from a checkpoint (or the newest under a root)."""
        path = Path(path)
        found = path if (path / checkpoint.COMMIT).exists() else checkpoint.latest(path)
        if found is None:
            raise ValueError(f"no committed checkpoint in {path}")
        dense = load_tree(found / "dense")  # verified before anything changes
        info = self.client.load(found)
        self.model.load_state_dict(dense["model"])
        self.optimizer.load_state_dict(dense["optimizer"])
        extra = info["extra"]
        self.step, self.epoch, self.batch_in_epoch = extra["step"], extra["epoch"], extra["batch_in_epoch"]
        return info

    def _summary(self, final: dict, samples: int, train_time: float) -> dict:
        timings = {**self.timings, **self.embedding.timings}
        summary = {**final, "steps": self.step, "samples": samples, "train_seconds": train_time,
                   "samples_per_s": samples / train_time if train_time else 0.0, "timings_s": timings,
                   "bad_lines": getattr(self.train_data, "bad_lines", 0),
                   "checkpoint": str(checkpoint.latest(self.run_dir / "checkpoints"))}
        if "teacher" in self.data_info:
            summary["teacher_eval_auc"] = self.data_info["teacher"]["eval"]["teacher_auc"]
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        plot_curves(self.metrics.read(), self.run_dir / "curves.png", self.recipe.train.name)
        return summary
