"""A run's checkpoints: what one holds, when it is a delta, which one is kept as the best, and
what a model must pass before it is saved or loaded; apart from the loop (``trainer.py``), which
decides when.

A checkpoint is a barrier: pushes are flushed, and the batch after it is pulled only after
the save. So a run resumed from step k is bitwise equal, tables and dense weights, to a run
that saved at step k and went on (one worker). The checkpoint holds every shard, the dense
model and optimizer state (and the baseline's), the step, the data position (epoch, batches
read in it) and the best evaluation's state (``best.py``), in one commit (``checkpoint/``). A
load is all or nothing: checked before any shard or parameter changes. ``Checkpoints`` saves and restores the
trainer's own state, so it holds the trainer, as ``Baseline`` does.
"""

import math
import uuid
from pathlib import Path

import torch
import torch.nn.functional as F

from cardinal.checkpoint.best import best_checkpoint, write_marker
from cardinal.checkpoint.chain import deltas_since_full
from cardinal.checkpoint.dense import save_tree
from cardinal.checkpoint.layout import DENSE, committed, committed_steps, latest, step_dir, step_of
from cardinal.checkpoint.reader import Reader
from cardinal.checkpoint.retention import remove_older
from cardinal.train import builder, job_servers


class Checkpoints:
    def __init__(self, trainer):
        self.trainer = trainer
        self.saved: int | None = None   # the step of the newest checkpoint this run has
        self.kept_best: int | None = None  # the step best.json names
        self.run_id = uuid.uuid4().hex  # the run's id in its checkpoints (checkpoint/chain.py); a resume loads it

    def begin(self, resume: bool) -> None:
        """Load the newest checkpoint to resume from; a new run refuses a directory that holds one,
        and servers another run has used (``job_servers.py``). First a dry save: every server, and
        worker 0 here, can write where a checkpoint goes (``PSClient.check_checkpoints``), so a job
        misconfigured for it fails now, not at its first save. Worker 0 alone does both, and alone
        looks in the run directory, which is its own (``leader_reads.py``): its refusal is every worker's."""
        tr = self.trainer
        root = tr.run_dir / "checkpoints"
        tr.workers.from_leader(lambda: tr.client.check_checkpoints(str(root.resolve())))
        if resume:
            tr.load(root)
            return

        def unused() -> None:
            if committed_steps(root):
                raise ValueError(f"{tr.run_dir} already holds checkpoints: resume it, or train into a new "
                                 "directory")

        tr.workers.from_leader(unused)
        job_servers.check_unused(tr)

    def save(self) -> int:
        """Every worker flushes its pushes; worker 0 saves the servers' shards and the dense state.

        When the step is the best evaluation's (``trainer.best``), ``checkpoints/best.json`` names it
        once it is committed, and only then may the previous best checkpoint go; the best one is
        never deleted by ``keep_checkpoints``."""
        tr = self.trainer
        tr._flush()
        tr.workers.barrier()
        root = (tr.run_dir / "checkpoints").resolve()
        is_best = tr.recipe.eval.keep_best and tr.best.step == tr.step
        if tr.workers.leader:
            position = {"step": tr.step, "epoch": tr.epoch, "batch_in_epoch": tr.batch_in_epoch,
                        "best": tr.best.state()}
            dense = {"model": tr.model.state_dict(), "optimizer": tr.optimizer.state_dict(),
                     "optimizer_name": tr.recipe.dense_optimizer.name,
                     **(tr.baseline.state() if tr.baseline is not None else {})}
            keep = tr.recipe.checkpoint.keep
            protect = {s for s in (self.kept_best, tr.step if is_best else None) if s is not None}
            base = self._delta_base(root)
            tr.client.save(str(root), tr.step, keep=keep, extra=position, protect=protect, base=base,
                           before_commit=lambda path: save_tree(path / DENSE, dense),
                           run={"id": self.run_id, "full_every": tr.recipe.checkpoint.full_every})
            if is_best:
                write_marker(root, tr.best.step, tr.best.metric, tr.best.result)
                remove_older(root, keep, protect={tr.step})
        if is_best:
            self.kept_best = tr.step
        tr.workers.barrier()
        tr.clock.restart()
        self.saved = tr.step
        for callback in tr.callbacks:
            callback.on_checkpoint(tr, tr.step, step_dir(root, tr.step), is_best)
        return tr.step

    def _delta_base(self, root: Path) -> int | None:
        """The step this save is a delta on (the previous checkpoint, while its chain is shorter than
        checkpoint.full_every - 1 and every shard can save one: ``ShardStore.health``), or None for a full one."""
        prev, full_every = self.saved, self.trainer.recipe.checkpoint.full_every
        if prev is None or full_every == 1 or not committed(step_dir(root, prev)):
            return None
        if deltas_since_full(root, prev) + 1 >= full_every:
            return None
        return prev if all(h.get("delta_safe", True) for h in self.trainer.client.health()) else None  # else full

    def mark_best(self) -> None:
        """Name this step's checkpoint, saved already, as the best (and let the previous best go)."""
        tr = self.trainer
        root = (tr.run_dir / "checkpoints").resolve()
        if tr.workers.leader:
            write_marker(root, tr.best.step, tr.best.metric, tr.best.result)
            remove_older(root, tr.recipe.checkpoint.keep, protect={tr.step})
        self.kept_best = tr.step

    def load(self, path: str | Path) -> dict:
        """Restore tables, dense state and data position from a checkpoint (or the newest under a root).

        All or nothing: the commit marker, the dense state (against the model's parameter names
        and shapes) and every shard's rows are verified before any shard or parameter changes.
        Worker 0 alone reads it and loads the servers (``_read``); every worker takes the dense
        state and position from worker 0, whatever its own run directory holds (``leader_reads.py``),
        and only once the servers hold the checkpoint: no worker pulls before."""
        tr = self.trainer
        read = tr.workers.from_leader(lambda: self._read(Path(path).resolve()))
        dense = read["dense"]
        tr.model.load_state_dict(dense["model"])
        builder.load_dense_state(tr.optimizer, dense["optimizer"])
        lr, decay = builder.dense_lr(tr.recipe, tr.workers.world), tr.recipe.dense_optimizer.weight_decay
        for group in tr.optimizer.param_groups:  # the recipe's hyper-parameters, not the saved ones:
            group["lr"], group["weight_decay"] = lr, decay  # a resume may lower the lr
        if tr.baseline is not None:
            tr.baseline.load_state(dense)
        info = {**read["info"], "path": read["path"]}
        extra = info["extra"]
        tr.step, tr.epoch, tr.batch_in_epoch = extra["step"], extra["epoch"], extra["batch_in_epoch"]
        self.saved = tr.step
        self.run_id = read["run_id"] or self.run_id  # none in a checkpoint from before run ids
        tr.best.restore(extra.get("best"))
        self.kept_best = read["kept_best"]
        # a crash between the best checkpoint's commit and best.json: repaired from the newest checkpoint
        # only (an older one, loaded by `cardinal eval RUN --checkpoint`, records an older best)
        if tr.recipe.eval.keep_best and tr.best.step is not None and tr.best.step != self.kept_best \
                and read["newest"] and tr.best.step in read["committed"]:
            if tr.workers.leader:
                write_marker(Path(read["path"]).parent, tr.best.step, tr.best.metric, tr.best.result)
            self.kept_best = tr.best.step
        return info

    def _read(self, path: Path) -> dict:
        """Worker 0's part of ``load``: the checkpoint verified against this model and loaded into
        the servers, and what every worker then restores: the dense state, the servers' answer
        (its ``extra``: the step, data position and best evaluation), the run's id, which steps
        are committed beside it and which one best.json names."""
        tr = self.trainer
        checkpoint = Reader.open(path)
        found = checkpoint.path
        dense = checkpoint.dense_state()
        self._check_dense(checkpoint.dense_path, dense)
        if tr.baseline is not None:
            tr.baseline.check_state(checkpoint.dense_path, dense)
        info = tr.client.load(found)
        root = found.parent
        kept = best_checkpoint(root)
        return {"dense": dense, "info": info, "path": str(found), "run_id": checkpoint.run_id,
                "kept_best": step_of(kept) if kept else None, "newest": found == latest(root),
                "committed": committed_steps(root)}

    def _check_dense(self, where: Path, dense) -> None:
        """The saved dense state fits this model (names, shapes), so loading it cannot fail halfway."""
        tr = self.trainer
        if not isinstance(dense, dict) or not isinstance(dense.get("model"), dict) \
                or not isinstance(dense.get("optimizer"), dict):
            raise ValueError(f"{where}: must hold 'model' and 'optimizer' state")
        expected = {k: tuple(v.shape) for k, v in tr.model.state_dict().items()}
        saved = {k: tuple(v.shape) if isinstance(v, torch.Tensor) else None for k, v in dense["model"].items()}
        if saved != expected:
            wrong = sorted(set(saved.items()) ^ set(expected.items()), key=str)[:3]
            raise ValueError(f"{where}: the model's parameters differ from this recipe's model (e.g. {wrong})")
        name = tr.recipe.dense_optimizer.name
        if dense.get("optimizer_name") != name:
            raise ValueError(f"{where}: the dense optimizer was {dense.get('optimizer_name')!r}, this recipe's is "
                             f"{name!r}: their state does not carry over; resume with dense_optimizer.name = "
                             f"{dense.get('optimizer_name')!r}")
        groups = dense["optimizer"].get("param_groups")
        if not isinstance(groups, list) or len(groups) != len(tr.optimizer.param_groups):
            raise ValueError(f"{where}: the optimizer state has other parameter groups than this recipe's optimizer")

    def last_checkpoint(self) -> str:
        """The newest committed checkpoint, as the error that stops a diverged run names it (worker
        0's: every worker calls it, once all agreed to stop)."""
        last = self.trainer.workers.from_leader(lambda: latest(self.trainer.run_dir / "checkpoints"))
        return f"the newest checkpoint is {last}" if last else "the run has no checkpoint"

    # --- refusing to save a diverged model -----------------------------------------------

    def check_before_save(self, batch) -> None:
        """Refuse to checkpoint a model gone non-finite: the dense weights must be finite, and so
        must the loss of the step's own batch with the rows and weights as that step left them
        (a sparse lr of 1e30 leaves finite rows whose next forward is NaN). Lookup-only pulls
        after a flush change nothing, so a resumed run stays bitwise equal."""
        with self.trainer.meter.excluded():
            self._check_finite(batch)

    def _check_finite(self, batch) -> None:
        tr = self.trainer
        tr._flush()
        tr.workers.barrier()  # every worker's pushes are applied before anyone looks
        loss = math.nan if not all(bool(torch.isfinite(p).all()) for p in tr.model.parameters()) else None
        if loss is None:
            for m in tr._modules():
                m.eval()
            try:
                with torch.no_grad():
                    dense, labels = tr._inputs(batch)
                    emb, wide = tr._embed(batch)
                    logits = tr.model(dense, emb, wide)
                    total = F.binary_cross_entropy_with_logits(logits, labels, reduction="sum").item()
                    total, count = tr.workers.sum(total, len(batch))  # over the global batch
                    loss = total / count
            finally:
                for m in tr._modules():
                    m.train()
        bad = not math.isfinite(loss)
        if tr.workers.world > 1:
            (bad,) = tr.workers.sum(float(bad))
        if bad:
            raise ValueError(f"step {tr.step} left the model non-finite (its batch's loss after the update is "
                             f"{loss}), so it was not checkpointed; {self.last_checkpoint()}. "
                             f"Lower dense_optimizer.lr or sparse_optimizer.lr")
