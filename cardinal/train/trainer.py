"""The training loop of a worker, on the embedded parameter server or on remote servers.

    trainer = Trainer(recipe, run_dir)
    summary = trainer.fit()                 # or fit(resume=True) to go on from the last checkpoint

One step: pooled embeddings for the batch (pulled ahead in async mode, see
``EmbeddingCollection``), the next batch's pulls sent, forward, backward (gradient rows
pushed from the hooks), dense optimizer step (all-reduced among workers by DDP).

Several workers (``torchrun``, ``cardinal launch``): worker r of W trains batch r of every
group of W consecutive batches (a last, incomplete group is dropped), so a step means the
same data position on every worker. Worker 0 writes metrics and coordinates checkpoints.

A checkpoint is a barrier: pushes are flushed, and the batch after it is pulled only after
the save. So a run resumed from step k is bitwise equal, tables and dense weights, to a run
that saved at step k and went on (one worker). The checkpoint holds every shard, the dense
model and optimizer state, the step and the data position (epoch, batches read in it).
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
from cardinal.ps import PSClient, checkpoint, embedded
from cardinal.ps.transport.grpc_transport import GrpcTransport
from cardinal.train import tables
from cardinal.train.config import DENSE_OPTIMIZERS, Recipe
from cardinal.train.readers import make_readers
from cardinal.train.report import MetricsLog, plot_curves
from cardinal.train.state_io import load_tree, save_tree
from cardinal.train.workers import Workers
from cardinal.worker import EmbeddingCollection
from cardinal.worker.sources import GeoReplica, PSSource

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, recipe: Recipe, run_dir: str | Path, progress: bool = True):
        self.recipe, self.run_dir = recipe, Path(run_dir)
        t, e = recipe.train, recipe.embedding
        self.workers = Workers(recipe.ps.timeout_s * 15)
        self.progress = progress and self.workers.leader
        if self.workers.leader:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=1))
        if t.kernel_threads:
            parallel.set_threads(t.kernel_threads)
        torch.manual_seed(t.seed)
        if not self.workers.leader:
            self.workers.barrier()  # worker 0 generates the data set first
        self.train_data, self.eval_data, self.data_info = make_readers(recipe.data, t.seed, self.progress)
        if self.workers.leader:
            self.workers.barrier()
        self.fields = list(self.train_data.sparse_fields)
        assert self.fields == tables.sparse_fields(recipe)
        model_spec = dict(recipe.model)
        model_cls = MODELS[model_spec.pop("name")]
        self.model = model_cls(len(self.train_data.dense_fields), len(self.fields), e.dim, **model_spec)

        self.net = self.workers.wrap(self.model)
        self.client = self._client(recipe)
        staleness = e.staleness if e.consistency == "async" else None
        source = GeoReplica(self.client, recipe.sparse_optimizer, e.geo_interval, recipe.ps.timeout_s) \
            if e.consistency == "geo" else PSSource(self.client, e.max_in_flight, recipe.ps.timeout_s)
        self.embedding = EmbeddingCollection(source, tables.features(recipe), e.pooling, staleness,
                                             timeout=recipe.ps.timeout_s)
        d = recipe.dense_optimizer
        self.optimizer = getattr(torch.optim, DENSE_OPTIMIZERS[d.name])(self.model.parameters(), lr=d.lr,
                                                                        weight_decay=d.weight_decay)
        self.metrics = MetricsLog(self.run_dir) if self.workers.leader else None
        self.step, self.epoch, self.batch_in_epoch = 0, 0, 0
        self.timings = {"data": 0.0, "compute": 0.0}

    @staticmethod
    def _client(recipe: Recipe) -> PSClient:
        ps = recipe.ps
        if not ps.servers:
            return embedded(tables.store_config(recipe), ps.shards, ps.concurrent)
        return PSClient(GrpcTransport(ps.servers, ps.job, ps.token(), timeout=ps.timeout_s, tls_ca=ps.tls_ca or None))

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
        loss = F.binary_cross_entropy_with_logits(self.net(batch.dense, emb, wide), batch.labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.timings["compute"] += time.perf_counter() - start
        return loss.item()

    # --- the loop ------------------------------------------------------------------------

    def fit(self, resume: bool = False) -> dict:
        t, w = self.recipe.train, self.workers
        if resume:
            self.load(self.run_dir / "checkpoints")
        elif checkpoint.committed_steps(self.run_dir / "checkpoints"):
            raise ValueError(f"{self.run_dir} already holds checkpoints: resume it, or train into a new directory")
        per_epoch = self.data_info["train_steps"]
        total = t.steps or (per_epoch // w.world * t.epochs if per_epoch else None)
        bar = tqdm(total=total, initial=self.step, unit="step", disable=not self.progress, desc="training")
        prefetching = self.recipe.embedding.consistency == "async" and self.recipe.embedding.staleness >= 1
        train_time, samples, window, final = 0.0, 0, [], None
        last_saved = self.step if resume else None
        done = bool(t.steps and self.step >= t.steps)
        while self.epoch < t.epochs and not done:
            groups = _groups(itertools.islice(iter(self.train_data), self.batch_in_epoch, None), w.world)
            batch = self._next(groups)
            while batch is not None:
                start = time.perf_counter()
                self.step += 1
                last = t.steps and self.step >= t.steps
                save_due = t.checkpoint_every and self.step % t.checkpoint_every == 0
                upcoming = self._next(groups)
                loss = self._train_step(batch, upcoming if prefetching and not save_due and not last else None)
                self.batch_in_epoch += w.world
                train_time += time.perf_counter() - start
                samples += len(batch)
                window.append(loss)
                bar.update(1)
                if self.step % t.log_every == 0 or last:
                    loss_sum, count, seen = w.sum(float(np.sum(window)), len(window), samples)
                    rate = seen / train_time
                    if w.leader:
                        self.metrics.write({"step": self.step, "epoch": self.epoch, "loss": loss_sum / count,
                                            "samples_per_s": rate, "time": time.time()})
                    bar.set_postfix(loss=f"{loss_sum / count:.4f}", samples_per_s=f"{rate:,.0f}")
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
        (samples,) = w.sum(samples)
        return self._summary(result, int(samples), train_time)

    def _next(self, groups):
        start = time.perf_counter()
        group = next(groups, None)
        self.timings["data"] += time.perf_counter() - start
        return None if group is None else group[self.workers.rank]

    # --- evaluation ----------------------------------------------------------------------

    def evaluate(self) -> dict:
        """AUC and logloss on the eval split, with lookup-only pulls (nothing is created)."""
        self.embedding.flush()
        for m in (self.model, self.embedding):
            m.eval()
        logits, labels = [], []
        w = self.workers
        with torch.no_grad():
            for i, batch in enumerate(self.eval_data):
                if i % w.world != w.rank:
                    continue
                emb, wide = self._embed(batch)
                logits.append(self.model(batch.dense, emb, wide))
                labels.append(batch.labels)
        for m in (self.model, self.embedding):
            m.train()
        empty = torch.zeros(0)
        logit, label = w.gather(torch.cat(logits or [empty])), w.gather(torch.cat(labels or [empty]))
        return {"eval_auc": float(binary_auroc(logit, label.long())),
                "eval_logloss": float(F.binary_cross_entropy_with_logits(logit, label)),
                "eval_rows": len(label)}

    def _log_eval(self) -> dict:
        result = self.evaluate()
        if self.workers.leader:
            self.metrics.write({"step": self.step, **result})
        if self.progress:
            tqdm.write(f"step {self.step}: AUC {result['eval_auc']:.4f}, logloss {result['eval_logloss']:.4f}")
        return result

    # --- checkpoints ---------------------------------------------------------------------

    def save(self) -> int:
        """Every worker flushes its pushes; worker 0 saves the servers' shards and the dense state."""
        self.embedding.flush()
        self.workers.barrier()
        if self.workers.leader:
            position = {"step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch}
            dense = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
            self.client.save(str((self.run_dir / "checkpoints").resolve()), self.step,
                             keep=self.recipe.train.keep_checkpoints, extra=position,
                             before_commit=lambda path: save_tree(path / "dense", dense))
        self.workers.barrier()
        return self.step

    def load(self, path: str | Path) -> dict:
        """Restore tables, dense state and data position from a checkpoint (or the newest under a root)."""
        path = Path(path).resolve()
        found = path if (path / checkpoint.COMMIT).exists() else checkpoint.latest(path)
        if found is None:
            raise ValueError(f"no committed checkpoint in {path}")
        dense = load_tree(found / "dense")  # verified before anything changes
        if self.workers.leader:
            info = self.client.load(found)
        self.workers.barrier()  # no worker pulls before the servers hold the checkpoint
        if not self.workers.leader:
            info = {"extra": checkpoint.read_json(found / checkpoint.COMMIT)["extra"]}
        self.model.load_state_dict(dense["model"])
        self.optimizer.load_state_dict(dense["optimizer"])
        extra = info["extra"]
        self.step, self.epoch, self.batch_in_epoch = extra["step"], extra["epoch"], extra["batch_in_epoch"]
        return info

    def _summary(self, final: dict, samples: int, train_time: float) -> dict:
        timings = {**self.timings, **self.embedding.timings}
        transport = self.client.transport
        if hasattr(transport, "bytes_sent"):  # network traffic, all workers together
            sent, received = self.workers.sum(transport.bytes_sent, transport.bytes_received)
            final = {**final, "bytes_sent": sent, "bytes_received": received}
        summary = {**final, "steps": self.step, "samples": samples, "train_seconds": train_time,
                   "samples_per_s": samples / train_time if train_time else 0.0, "timings_s": timings,
                   "bad_lines": getattr(self.train_data, "bad_lines", 0),
                   "checkpoint": str(checkpoint.latest(self.run_dir / "checkpoints")), "workers": self.workers.world}
        if "teacher" in self.data_info:
            summary["teacher_eval_auc"] = self.data_info["teacher"]["eval"]["teacher_auc"]
        if self.workers.leader:
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
            plot_curves(self.metrics.read(), self.run_dir / "curves.png", self.recipe.train.name,
                        summary.get("teacher_eval_auc"))
        return summary


def _groups(batches, size: int):
    """Consecutive groups of ``size`` batches; a last, incomplete group is dropped."""
    while len(group := list(itertools.islice(batches, size))) == size:
        yield group
