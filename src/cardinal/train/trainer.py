"""The training loop of a worker, on the embedded parameter server or on remote servers.

    from cardinal.recipe import load
    from cardinal.train import Callback, Trainer

    class Watch(Callback):
        def on_eval(self, trainer, step, result):
            print(step, result["eval_auc"], trainer.best.step)

    recipe = load("criteo_synthetic", ["train.epochs=3", "eval.every=200"])
    trainer = Trainer(recipe, "runs/mine", callbacks=[Watch()])
    summary = trainer.fit()                 # or fit(resume=True) to go on from the last checkpoint
    summary["eval_auc"], summary["best_step"], summary["stopped_early"]

Several workers (``torchrun``, ``cardinal launch``): the recipe defines the math, the cluster only
the speed (docs/distributed.md). Worker r of W trains its share of every global batch, dense
gradients are summed (DDP), the servers apply each step's pushes of every worker as one update
(``consistency.sync.combine``), and no worker pulls rows for step t before every worker's pushes
of step t - 1 - k are applied (k = 0 in sync mode, ``consistency.async.staleness`` in async; with
``consistency.async.compensation = "lr"`` a push's lr is divided by its rows' staleness). Worker 0
writes metrics and coordinates checkpoints.

The loop decides when; the rest has a module each: the parts a recipe builds (``builder.py``),
one step (``step.py``; on a GPU the model runs there, dedup and the servers stay on the host),
evaluation every ``eval.every`` steps and at the end, keeping each new best model
(``evaluator.py``), checkpoints (``checkpoints.py``: a barrier, so a run resumed from step k is
bitwise equal to one that saved at step k and went on) and what the run reports (``summary.py``).

A run that learns nothing fails loudly rather than reporting an untrained model: zero
training steps, a non-finite loss, a checkpoint that would hold a model gone non-finite
(checked before each save by the loss of the step's own batch after its update), an empty
eval split or a non-finite metric each stop the run with a ValueError that says what to change.
"""

import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from cardinal.data.prefetch import prefetched
from cardinal.progress import Progress
from cardinal.recipe import Recipe
from cardinal.train import builder, tables, threads
from cardinal.train.baseline import Baseline
from cardinal.train.best import Best
from cardinal.train.callbacks import Callback, EarlyStopping
from cardinal.train.checkpoint_clock import CheckpointClock
from cardinal.train.checkpoints import Checkpoints
from cardinal.train.evaluator import Evaluator
from cardinal.train.input_meter import InputMeter
from cardinal.train.live_metrics import WorkerMetrics
from cardinal.train.interrupt import StopFlag
from cardinal.train.report import MetricsLog
from cardinal.train.step import Stepper
from cardinal.train.summary import log_line, summarise
from cardinal.train.workers import Workers
from cardinal.worker.device import resolve_device, staging_for

log = logging.getLogger(__name__)


@dataclass
class _Run:
    """One fit() call's own state: this worker's counts, the newest evaluation and batch, the reader."""
    bar: Progress
    prefetching: bool  # async mode: the next batch's rows are pulled while this step runs
    train_time: float = 0.0
    samples: int = 0
    window: list = field(default_factory=list)  # the losses since the last log line
    final: tuple | None = None  # (step, result) of the newest evaluation
    trained: object = None  # the newest batch trained on
    batches: object = None  # this epoch's reader, on its thread (data/prefetch.py)


class Trainer:
    def __init__(self, recipe: Recipe, run_dir: str | Path, progress: bool = True,
                 callbacks: list[Callback] = (), stop: StopFlag | None = None):
        self.recipe, self.run_dir = recipe, Path(run_dir)
        self.signals = stop or StopFlag()  # set by SIGINT / SIGTERM (train/interrupt.py)
        t = recipe.train
        self.workers = Workers(recipe.ps.timeout_s * 15, resolve_device(t.device), fallback=t.device == "auto")
        self.device = self.workers.device  # "auto" with workers sharing a GPU: the CPU (train/workers.py)
        # the mode this job trains in: a knob of the other mode "auto" could be is refused before any work
        self.consistency = recipe.consistency.resolve(distributed=bool(recipe.ps.servers) or self.workers.world > 1)
        self.progress = progress and self.workers.leader
        if self.workers.leader:  # recipe.json is written by fit(), once a resume's checkpoint has loaded
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.threads = threads.apply(t.threads, embedded=not recipe.ps.servers)  # torch, kernels, numba: one budget
        torch.manual_seed(t.seed)
        self.train_data, self.eval_data, self.data_info = builder.readers(recipe, self.workers, self.progress)
        self.fields = list(self.train_data.sparse_fields)
        assert self.fields == tables.sparse_fields(recipe)
        self.model = builder.model(recipe, self.train_data).to(self.device)
        self.model_seeds = bool(recipe.model.get("dropout"))
        self.staging = staging_for(self.device)  # None on the CPU: no copies, today's path
        self.stepper = Stepper(self)  # one step, and the batch's inputs staged where the model runs
        self.net = self.workers.wrap(self.model)
        w = self.workers
        self.client = builder.client(recipe, w, self.run_dir)
        self.embedding = builder.embedding(recipe, self.client, w, self.consistency, self.device, self.staging)
        self.optimizer = builder.dense_optimizer(recipe, self.model, w.world)
        self.schedule = builder.schedule(recipe, self.data_info, w.world)
        self.baseline = Baseline(self, builder.source(recipe, self.client, w, self.consistency),
                                 len(self.train_data.dense_fields)) if tables.baseline(recipe) else None
        self.metrics = MetricsLog(self.run_dir, recipe.metrics.tensorboard) if self.workers.leader else None
        self.clock = CheckpointClock(recipe.checkpoint.minutes, self.workers.leader)  # worker 0's decides
        self.step, self.epoch, self.batch_in_epoch = 0, 0, 0
        self.timings = {"data": 0.0, "compute": 0.0}
        self.meter = InputMeter(self.staging, [self.timings, self.embedding.timings,
                                               *([self.baseline.embedding.timings] if self.baseline else [])])
        self.evaluator = Evaluator(self)
        ev = recipe.eval
        self.callbacks = ([EarlyStopping(ev.patience)] if ev.early_stop != "none" else []) + list(callbacks)
        self.stop_reason: str | None = None
        self.live = None  # a worker's Prometheus endpoint (metrics.port), from fit() on
        self.checkpoints = Checkpoints(self)

    def close(self) -> None:
        """Close the connections to the servers (a no-op for embedded shards); the trainer is done."""
        if self.live is not None:
            self.live.close()
            self.live = None
        try:
            self.client.transport.close()
        except Exception as e:  # noqa: BLE001 - closing is best effort, after the run's own outcome
            log.debug("closing the transport: %s", e)

    def stop(self, reason: str) -> None:
        """End the run after this step (saved, evaluated, summarised as usual); ``reason`` is printed
        and recorded in summary.json as ``stopped_early``. Every worker must call it at the same step."""
        self.stop_reason = reason

    def _flush(self) -> None:
        """Every push of this worker (model and baseline) applied."""
        self.embedding.flush()
        if self.baseline is not None:
            self.baseline.flush()

    def _modules(self):
        return (self.model, self.embedding, *(self.baseline.modules if self.baseline is not None else ()))

    # --- the loop ------------------------------------------------------------------------

    def fit(self, resume: bool = False) -> dict:
        """Train to train.steps or the last epoch (or an early stop, a signal), evaluate, save, return the summary
        (``resume``: from the newest checkpoint). Servers stay up for what follows; ``job_servers.end`` ends them."""
        r = self.recipe
        t = r.train
        run = self._begin(resume)
        for batch, n, upcoming, stop, timed, start in self._steps(run):
            last = bool(t.steps and self.step >= t.steps) or stop
            final_step = last or (upcoming is None and self.epoch == t.epochs - 1)
            save_due = (r.checkpoint.every and self.step % r.checkpoint.every == 0) or timed
            eval_due = r.eval.every and self.step % r.eval.every == 0
            barrier = save_due or eval_due or final_step  # evaluations may save the best model
            loss = self._train_step(batch, n, upcoming if run.prefetching and not barrier else None)
            self.stepper.check_loss(loss)
            for callback in self.callbacks:
                callback.on_step(self, self.step, loss)
            run.trained = batch
            self.batch_in_epoch += 1
            run.train_time += time.perf_counter() - start
            run.samples += len(batch)
            run.window.append(loss)
            run.bar.update(1)
            if self.step % r.metrics.log_every == 0 or last:
                mean, rate = log_line(self, run.window, run.samples, run.train_time, final_step)
                run.bar.set_postfix(loss=f"{mean:.4f}", samples_per_s=f"{rate:,.0f}")
                run.window = []
            if stop:  # a signal on some worker: every worker saves this step and ends, without evaluating
                self._save_checked(batch)
            elif not final_step:  # the final step is evaluated, then saved, after the loop (bad lines judged)
                if eval_due:
                    run.final = (self.step, self.evaluator.eval_and_keep(batch))
                if save_due and self.checkpoints.saved != self.step:
                    self._save_checked(batch)
            if last or self.stop_reason is not None:
                break
        return self._end(run)

    def _begin(self, resume: bool) -> _Run:
        """Load the checkpoint to resume (or refuse to train over one), record the recipe, start the
        live metrics; a resume may stop at once or evaluate first (``Evaluator.resumed``)."""
        t, w = self.recipe.train, self.workers
        self.checkpoints.begin(resume)
        if w.leader:  # only now: a refused resume leaves the run's recipe.json as it was
            (self.run_dir / "recipe.json").write_text(json.dumps(self.recipe.to_dict(), indent=1))
        per_epoch = self.data_info["train_steps"] or self.data_info.get("train_steps_estimate")
        total = t.steps or (per_epoch * t.epochs if per_epoch else None)
        run = _Run(Progress(total=total, initial=self.step, disable=not self.progress, desc="training"),
                   prefetching=self.consistency == "async" and self.recipe.consistency.async_.staleness >= 1)
        m = self.recipe.metrics
        if m.port >= 0 and self.live is None:
            self.live = WorkerMetrics(w.rank, m.host, m.port + w.rank if m.port else 0)
        if resume:
            run.final = self.evaluator.resumed()
        return run

    def _steps(self, run: _Run):
        """Each step's (batch, examples in the global batch, next batch, stop agreed, checkpoint due,
        start time), from the data position on, over the epochs; a batch with no good line is no step."""
        t, w = self.recipe.train, self.workers
        if (t.steps and self.step >= t.steps) or self.stop_reason is not None:
            return
        while self.epoch < t.epochs:  # batches read on a thread, ahead of the step (data/prefetch.py)
            run.batches = prefetched(itertools.islice(iter(self.train_data), self.batch_in_epoch, None))
            batch = self._next(run.batches)
            while batch is not None:
                start = time.perf_counter()
                n, interrupts, terms, timed = w.sum(len(batch), *self.signals.flags(), self.clock.due())  # + stop, time
                stop = self.signals.agree(interrupts, terms)  # any worker signalled: all save this step and end
                if n == 0:  # every line of this global batch was bad: no step, on any worker
                    self.batch_in_epoch += 1
                    batch = self._next(run.batches)
                    continue
                self.step += 1
                upcoming = self._next(run.batches)
                yield batch, n, upcoming, stop, timed, start
                batch = upcoming
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0

    def _end(self, run: _Run) -> dict:
        """After the last step: refuse a run that trained nothing or read too many bad lines;
        evaluate and save the final step unless done already; the summary."""
        run.bar.close()
        if run.batches is not None:
            run.batches.close()  # stops the reading thread before the reader's counts are looked at
        self.signals.raise_if_agreed(self.step, self.run_dir)  # saved above; the command prints one line
        self._check_bad_rows()  # the share of bad lines read, also when train.steps ended the run early
        if self.step == 0:
            files = ", ".join(map(str, self.data_info["train_files"])) or "none"
            raise ValueError(f"no training step: the training data ({files}) gave no batch; "
                             f"check that the files hold good lines (see the warnings above)")
        if self.stop_reason is not None:
            log.info(self.stop_reason)
            if self.progress:
                tqdm.write(self.stop_reason)
        final, trained = run.final, run.trained
        result = final[1] if final and final[0] == self.step else self.evaluator.eval_and_keep(trained)
        if self.checkpoints.saved != self.step:
            self._save_checked(trained)
        (samples,) = self.workers.sum(run.samples)
        return self._summary(result, int(samples), run.train_time)

    def _save_checked(self, batch) -> None:
        """Save this step once its own batch shows the model finite (``Checkpoints.check_before_save``)."""
        self.checkpoints.check_before_save(batch)
        self.save()

    def _check_bad_rows(self) -> None:
        """The share of bad lines over every worker's lines, so W workers stop, or go on, together
        and as one process would (each worker counts only the lines of its own share)."""
        bad = getattr(self.train_data, "bad", None)
        if bad is None:
            return
        if self.workers.world > 1:
            bad.bad, bad.rows = (int(x) for x in self.workers.sum(bad.bad, bad.rows))
        bad.check()

    def _next(self, batches):
        start = time.perf_counter()
        batch = next(batches, None)
        self.timings["data"] += time.perf_counter() - start
        return batch

    # --- the parts in their own modules, as callers and tests know them ---------------------

    def _embed(self, batch):
        return self.stepper.embed(batch)

    def _inputs(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.stepper.inputs(batch)

    def _train_step(self, batch, n: float, upcoming) -> float:
        return self.stepper.train(batch, n, upcoming)

    @property
    def best(self) -> Best:
        """The best evaluation yet (``best.py``); callbacks read it."""
        return self.evaluator.best

    def evaluate(self) -> dict:
        """AUC and logloss on the eval split, with lookup-only pulls (nothing is created)."""
        return self.evaluator.evaluate()

    def save(self) -> int:
        """Every worker flushes its pushes; worker 0 saves the servers' shards and the dense state."""
        return self.checkpoints.save()

    def load(self, path: str | Path) -> dict:
        """Restore tables, dense state and data position from a checkpoint (or the newest under a root)."""
        return self.checkpoints.load(path)

    def _summary(self, final: dict, samples: int, train_time: float) -> dict:
        return summarise(self, final, samples, train_time)  # a method: benchmarks/e2e.py times it apart
