"""What a run reports, apart from the loop (``trainer.py``) that says when: a line of
metrics.jsonl (and the live endpoint's numbers) every ``metrics.log_every`` steps, and
summary.json at the end. Every worker calls both: their sums over workers are collectives.

The summary's headline is the best kept model's evaluation (the last step's beside it, as
last_*), then the run's counts, rates, traffic and timings, summed over workers where each
worker holds only its share.
"""

import json
import time

import numpy as np

from cardinal.checkpoint.best import best_checkpoint
from cardinal.checkpoint.layout import latest
from cardinal.train import wire_metrics
from cardinal.train.memory_metrics import server_metrics
from cardinal.train.report import plot_curves
from cardinal.worker import EmbeddingCollection
from cardinal.worker.sources.cache import CachedSource


def staleness(embedding: EmbeddingCollection) -> dict:
    """p50 and p99 of the staleness of the rows this worker pulled (steps; see ``PSSource``)."""
    counts = getattr(embedding.source, "staleness_counts", None)
    if not counts:
        return {}
    values = np.repeat(*zip(*sorted(counts.items())))
    return {"staleness_p50": float(np.percentile(values, 50)), "staleness_p99": float(np.percentile(values, 99))}


def cache_metrics(embedding: EmbeddingCollection) -> dict:
    """The worker cache's numbers (hit rates, evictions, staleness), for metrics.jsonl and summary.json."""
    return embedding.source.metrics() if isinstance(embedding.source, CachedSource) else {}


def log_line(trainer, losses: list[float], samples: int, train_time: float, final_step: bool) -> tuple[float, float]:
    """The mean loss since the last line (over every worker) and the rate, written to metrics.jsonl
    (worker 0) and the live endpoint; returned for the progress bar."""
    w = trainer.workers
    loss_sum, count, seen = w.sum(float(np.sum(losses)), len(losses), samples)
    if w.world > 1:  # each worker's loss is its share of the global batch's mean
        count /= w.world
    mean, rate = loss_sum / count, seen / train_time
    if final_step:  # its pushes leave from a thread: counted once sent, so the line matches the summary
        trainer._flush()
    wire = wire_metrics.per_sample(trainer.client, w, samples)  # every worker: a sum over them
    if w.leader:
        trainer.metrics.write({"step": trainer.step, "epoch": trainer.epoch, "loss": mean, "samples_per_s": rate,
                               "time": time.time(), **staleness(trainer.embedding), **wire,
                               **trainer.meter.metrics(train_time), **cache_metrics(trainer.embedding),
                               **server_metrics(trainer.client)})
    if trainer.live is not None:
        trainer.live.update(trainer.step, samples, mean, rate, {**trainer.timings, **trainer.embedding.timings},
                            {**staleness(trainer.embedding), **cache_metrics(trainer.embedding)})
    return mean, rate


def summarise(trainer, final: dict, samples: int, train_time: float) -> dict:
    """The best kept model's eval metrics as the headline (the last step's beside them); worker 0
    writes summary.json and curves.png. Every worker calls it (its sums are collectives)."""
    best, w, run_dir = trainer.best, trainer.workers, trainer.run_dir
    timings = {**trainer.timings, **trainer.embedding.timings}
    root = run_dir / "checkpoints"  # worker 0's, which it alone reads (leader_reads.py)
    keep = trainer.recipe.eval.keep_best
    kept, newest = w.from_leader(lambda: (best_checkpoint(root) if keep else None, latest(root)))
    headline = best.result if kept is not None and best.step is not None else final
    summary = {**headline, **{f"last_{k}": v for k, v in final.items()},
               "best_step": best.step if kept is not None else trainer.step,
               "best_checkpoint": str(kept if kept is not None else newest),
               "stopped_early": trainer.stop_reason}
    transport = trainer.client.transport
    if hasattr(transport, "bytes_sent"):  # network traffic, all workers together
        sent, received = w.sum(transport.bytes_sent, transport.bytes_received)
        summary.update(bytes_sent=sent, bytes_received=received)
    summary = {**summary, "steps": trainer.step, "samples": samples, "train_seconds": train_time,
               "samples_per_s": samples / train_time if train_time else 0.0, "timings_s": timings,
               "bad_lines": getattr(trainer.train_data, "bad_lines", 0),
               "checkpoint": str(newest), "workers": w.world,
               **staleness(trainer.embedding), **wire_metrics.per_sample(trainer.client, w, samples, summed=True),
               **trainer.meter.summary(train_time), "device": str(trainer.device), **cache_metrics(trainer.embedding),
               **server_metrics(trainer.client)}
    if "teacher" in trainer.data_info:
        summary["teacher_eval_auc"] = trainer.data_info["teacher"]["eval"]["teacher_auc"]
    if w.leader:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        plot_curves(trainer.metrics.read(), run_dir / "curves.png", trainer.recipe.train.name,
                    summary.get("teacher_eval_auc"))
    return summary


def summary_line(s: dict) -> str:
    """What ``cardinal train`` prints of a run's summary: its eval, speed and steps, the baseline's
    and the teacher's AUC where there are, and which step's model was kept."""
    line = f"AUC {s['eval_auc']:.4f}  logloss {s['eval_logloss']:.4f}  {s['samples_per_s']:,.0f} samples/s  {s['steps']} steps"
    if "baseline_lr_auc" in s:
        line += f"  (lr baseline AUC {s['baseline_lr_auc']:.4f})"
    if "teacher_eval_auc" in s:
        line += f"  (teacher AUC {s['teacher_eval_auc']:.4f})"
    if s.get("best_step") is not None and s["best_step"] != s["steps"]:
        line += f"\nthe kept model is step {s['best_step']}'s (last step: AUC {s['last_eval_auc']:.4f})"
    if s.get("stopped_early"):
        line += f"\n{s['stopped_early']}"
    return line
