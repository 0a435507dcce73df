"""End-to-end training throughput and AUC: Cardinal against plain PyTorch, side by side.

    python benchmarks/e2e.py [--quick] [--steps N]

Same model (DeepFM), same generated data (26 sparse + 13 dense fields), same batch size,
same number of steps, batches read into memory once and shared by every run:
  - cardinal:            the default recipe's trainer (embedded parameter server, prefetch);
  - torch adagrad:       what a user does without Cardinal: ``nn.EmbeddingBag(sparse=True)``
                         tables sized by the hashing trick (id % size), sparse Adagrad;
  - torch sparseadam:    the same with ``SparseAdam``;
  - dense-only bound:    the same model and steps with the embedding output replaced by a
                         precomputed tensor (training if embeddings were free);
  - Cardinal at its best lr with bf16 rows and gradients (``wire.pull``/``wire.push``), and
    with a worker cache of 10% of the rows (``cache.bytes``, s = 4): embedding bytes per
    sample each way beside AUC.

Like with like: every run times the same scope, from the first step until the last update
is applied (Cardinal's final push flush included; its evaluations, checkpoint and summary
excluded, as the torch loops have none). Every system's sparse learning rate is tuned over
the same grid (``SPARSE_LRS``): each picks its best on the first half of the eval split and
reports AUC and logloss on the second half. Also: where Cardinal's step time goes, and the
Criteo reader's rows/s against the rate training consumes rows.
"""

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.functional.classification import binary_auroc

sys.path.insert(0, str(Path(__file__).parent))
from cache import cache_bytes, rows_created  # noqa: E402
from huge_pages import huge_like  # noqa: E402
from report import write  # noqa: E402

from cardinal.data import CriteoReader  # noqa: E402
from cardinal.parallel import available_cores  # noqa: E402
from cardinal.models import DeepFM  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402
from cardinal.train.readers import synthetic_dir  # noqa: E402


class Cached:
    """A reader whose batches were read once, so every run trains on identical batches."""

    def __init__(self, reader, limit=None):
        self.dense_fields, self.sparse_fields = reader.dense_fields, reader.sparse_fields
        self.batches = []
        for b in reader:
            if limit is not None and len(self.batches) >= limit:
                break
            self.batches.append(b)

    def __iter__(self):
        return iter(self.batches)


class HashedEmbeddings(nn.Module):
    """The hashing trick: every field's ids modulo ``size`` into one shared table."""

    def __init__(self, fields, size, dim):
        super().__init__()
        self.fields, self.size = fields, size
        self.bag = nn.EmbeddingBag(size, dim, mode="sum", sparse=True, include_last_offset=True)
        nn.init.uniform_(self.bag.weight, -0.01, 0.01)

    def forward(self, sparse):
        values, offsets, base = [], [], 0
        for f in self.fields:
            b = sparse[f]
            values.append(b.values % self.size)
            offsets.append(b.offsets[:-1] + base)
            base += len(b.values)
        offsets.append(np.array([base]))
        out = self.bag(torch.from_numpy(np.concatenate(values)), torch.from_numpy(np.concatenate(offsets)))
        return out.view(len(self.fields), -1, out.shape[1]).transpose(0, 1)


SPARSE_LRS = (0.003, 0.01, 0.03, 0.1)  # the same grid for every system's sparse optimizer
TORCH_TABLE_ROWS = 1 << 22  # the torch runs' hashed table: ids % this


def evaluate(logits_fn, batches):
    logits, labels = [], []
    with torch.no_grad():
        for b in batches:
            logits.append(logits_fn(b))
            labels.append(b.labels)
    logit, label = torch.cat(logits), torch.cat(labels)
    return float(binary_auroc(logit, label.long())), float(F.binary_cross_entropy_with_logits(logit, label))


def run_torch(recipe, train, halves, fields, sparse_opt: str, lr: float, size: int, huge: bool = False):
    """(train seconds, (AUC, logloss) on each eval half) for plain PyTorch at sparse ``lr``, on every
    core (nothing works beside it; Cardinal's trainer leaves half to its embedded shards). ``huge``:
    the tables and Adagrad's state on transparent huge pages, as a kernel with THP "always" gives
    them unasked (``huge_pages.py``; SparseAdam's state, made at its first step, stays as torch makes it)."""
    torch.set_num_threads(available_cores())
    torch.manual_seed(recipe.train.seed)
    dim = recipe.embedding.dim
    model = DeepFM(len(train.dense_fields), len(fields), dim, **{k: v for k, v in recipe.model.items() if k != "name"})
    deep, wide = HashedEmbeddings(fields, size, dim), HashedEmbeddings(fields, size, 1)
    nn.init.zeros_(wide.bag.weight)
    if huge:
        deep.bag.weight, wide.bag.weight = (nn.Parameter(huge_like(b.weight.detach())) for b in (deep.bag, wide.bag))
    sparse_params = [deep.bag.weight, wide.bag.weight]
    opt_cls = torch.optim.Adagrad if sparse_opt == "adagrad" else torch.optim.SparseAdam
    sopt = opt_cls(sparse_params, lr=lr)
    if huge and sparse_opt == "adagrad":
        for p in sparse_params:
            sopt.state[p]["sum"] = huge_like(sopt.state[p]["sum"])
    dopt = torch.optim.Adam(model.parameters(), lr=recipe.dense_optimizer.lr, fused=True)  # as Cardinal

    def logits(b):
        return model(b.dense, deep(b.sparse), wide(b.sparse).squeeze(2))

    start = time.perf_counter()
    for b in train:
        loss = F.binary_cross_entropy_with_logits(logits(b), b.labels)
        sopt.zero_grad()
        dopt.zero_grad()
        loss.backward()
        sopt.step()
        dopt.step()
    seconds = time.perf_counter() - start
    model.eval()
    return seconds, [evaluate(logits, h) for h in halves]


def run_cardinal(recipe, lr: float, tmp: Path, train, halves, on_trainer=None, before_fit=None):
    """(train seconds, metrics on each eval half, summary) for Cardinal's trainer at sparse ``lr``
    (``on_trainer``: called with the trainer after its fit, e.g. to read its timers; ``before_fit``:
    called with no argument just before it).

    The timed scope matches the torch loops: ``fit``'s wall time less its evaluation, checkpoint
    and summary, while the flush of the last pushes (done at the start of the checkpoint) counts.
    """
    recipe = dataclasses.replace(recipe, sparse_optimizer={**recipe.sparse_optimizer, "lr": lr})
    trainer = Trainer(recipe, tmp / f"cardinal-lr{lr}", progress=False)
    trainer.train_data, trainer.eval_data = train, halves[0]
    excluded = 0.0

    def untimed(fn, flush_first=False):
        def call(*args, **kwargs):
            nonlocal excluded
            if flush_first:
                trainer.embedding.flush()  # applying the last updates is training
            if trainer.device.type == "cuda":  # so is the device's last step (as the torch runs synchronise)
                torch.cuda.synchronize(trainer.device)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                excluded += time.perf_counter() - start
        return call

    trainer.evaluate = untimed(trainer.evaluate)
    trainer.save = untimed(trainer.save, flush_first=True)
    trainer._summary = untimed(trainer._summary)
    if before_fit is not None:
        before_fit()
    start = time.perf_counter()
    summary = trainer.fit()
    seconds = time.perf_counter() - start - excluded
    metrics = [(summary["eval_auc"], summary["eval_logloss"])]
    if on_trainer is not None:
        on_trainer(trainer)
    trainer.eval_data = halves[1]
    second = trainer.evaluate()
    metrics.append((second["eval_auc"], second["eval_logloss"]))
    return seconds, metrics, summary


def variants(recipe, created: int) -> list[tuple[str, list[str]]]:
    """Cardinal with rows and gradients as bf16, and with a worker cache of 10% of the rows the
    run created (s = 4)."""
    return [("cardinal, bf16 rows and gradients", ['wire.pull="bf16"', 'wire.push="bf16"']),
            ("cardinal, cache 10% of rows, s=4", [f"cache.bytes={cache_bytes(recipe, created, 0.1)}",
                                                  "cache.staleness=4"])]


def wire_bytes(summary: dict | None) -> dict:
    """Embedding bytes per sample each way (at the codecs' sizes), for Cardinal's rows."""
    if summary is None:
        return {"pull B/sample": "-", "push B/sample": "-"}
    return {"pull B/sample": summary["pull_bytes_per_sample"], "push B/sample": summary["push_bytes_per_sample"]}


def run_dense_only(recipe, train, fields):
    torch.manual_seed(recipe.train.seed)
    dim = recipe.embedding.dim
    model = DeepFM(len(train.dense_fields), len(fields), dim, **{k: v for k, v in recipe.model.items() if k != "name"})
    opt = torch.optim.Adam(model.parameters(), lr=recipe.dense_optimizer.lr, fused=True)
    batch = train.batches[0]
    emb = torch.randn(len(batch), len(fields), dim) * 0.01
    wide = torch.zeros(len(batch), len(fields))
    start = time.perf_counter()
    for b in train:
        n = len(b)
        loss = F.binary_cross_entropy_with_logits(model(b.dense, emb[:n], wide[:n]), b.labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - start


class Batches:
    def __init__(self, batches, like):
        self.batches, self.dense_fields, self.sparse_fields = batches, like.dense_fields, like.sparse_fields

    def __iter__(self):
        return iter(self.batches)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small data set and few steps")
    parser.add_argument("--steps", type=int, default=0, help="steps per run (default: one epoch)")
    args = parser.parse_args()
    sets = ["data.synthetic.rows=200000", "data.synthetic.eval_rows=20000"] if args.quick else []
    sets = [*sets, "eval.every=0", "data.batch_size=4096",  # the published batch
            'train.baseline="none"',  # the system alone, not its lr baseline
            'train.device="cpu"']  # beside torch on the CPU: "auto" would take a GPU where there is one (gpu.py)
    recipe = load("criteo_synthetic", sets)
    size = TORCH_TABLE_ROWS
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        probe = Trainer(recipe, tmp / "probe", progress=False)  # generates the data set once
        train_path = synthetic_dir(recipe.data) / "train.tsv"
        start = time.perf_counter()
        rows = sum(len(b) for b in CriteoReader([train_path], recipe.data.batch_size))
        reader_rate = rows / (time.perf_counter() - start)
        train = Cached(probe.train_data, args.steps or None)
        evaluation = Cached(probe.eval_data)
        half = len(evaluation.batches) // 2
        halves = [Batches(evaluation.batches[:half], evaluation), Batches(evaluation.batches[half:], evaluation)]
        fields = probe.fields
        steps, samples = len(train.batches), sum(len(b) for b in train.batches)
        print(f"{steps} steps of {recipe.data.batch_size} on {recipe.data.synthetic.rows:,} generated rows; "
              f"sparse lr grid {SPARSE_LRS} for each of 3 systems; running...")

        dense_s = run_dense_only(recipe, train, fields)
        ours = f"cardinal (embedded, {recipe.ps.shards} shard{'s' if recipe.ps.shards > 1 else ''}, prefetch)"
        grid, summaries, created = [], {}, {}
        for lr in SPARSE_LRS:
            seconds, metrics, summaries[lr] = run_cardinal(recipe, lr, tmp, train, halves)
            created[lr] = rows_created(summaries[lr])  # read before the checkpoints go with tmp
            grid.append((ours, "adagrad", lr, seconds, metrics))
            for opt in ("adagrad", "sparseadam"):
                seconds, metrics = run_torch(recipe, train, halves, fields, opt, lr, size)
                grid.append((f"torch EmbeddingBag, ids % {size:,}", opt, lr, seconds, metrics))
            print(f"  lr {lr}: " + ", ".join(f"{g[0].split()[0]} {g[1]} AUC {g[4][0][0]:.4f}" for g in grid[-3:]))

    grid_rows = [{"run": name, "sparse optimizer": opt, "sparse lr": lr, "samples/s": samples / s,
                  "select AUC": m[0][0], "eval AUC": m[1][0], "eval logloss": m[1][1]}
                 for name, opt, lr, s, m in grid]
    best = {}
    for row in grid_rows:  # each system's best learning rate, chosen on the selection half
        key = (row["run"], row["sparse optimizer"])
        if key not in best or row["select AUC"] > best[key]["select AUC"]:
            best[key] = row
    cardinal_lr = best[(ours, "adagrad")]["sparse lr"]
    rows_out = [{"run": r["run"], "sparse optimizer": r["sparse optimizer"], "best sparse lr": r["sparse lr"],
                 "samples/s": r["samples/s"], "x dense-only bound": r["samples/s"] / (samples / dense_s),
                 "eval AUC": r["eval AUC"], "eval logloss": r["eval logloss"],
                 **wire_bytes(summaries[r["sparse lr"]] if r["run"].startswith("cardinal") else None)}
                for r in best.values()]
    with tempfile.TemporaryDirectory() as tmp:  # the codec and cache rows, at Cardinal's best lr
        for i, (name, extra) in enumerate(variants(recipe, created[cardinal_lr])):
            seconds, metrics, summary = run_cardinal(load("criteo_synthetic", [*sets, *extra]), cardinal_lr,
                                                     Path(tmp) / f"variant{i}", train, halves)
            rows_out.append({"run": name, "sparse optimizer": "adagrad", "best sparse lr": cardinal_lr,
                             "samples/s": samples / seconds, "x dense-only bound": dense_s / seconds,
                             "eval AUC": metrics[1][0], "eval logloss": metrics[1][1], **wire_bytes(summary)})
            print(f"  {name}: AUC {metrics[1][0]:.4f}, {samples / seconds:,.0f} samples/s")
    rows_out.append({"run": "dense-only bound", "sparse optimizer": "-", "best sparse lr": "-",
                     "samples/s": samples / dense_s, "x dense-only bound": 1.0,
                     "eval AUC": float("nan"), "eval logloss": float("nan"), **wire_bytes(None)})
    summary = summaries[cardinal_lr]
    t = summary["timings_s"]
    per_step = {k: 1000 * v / steps for k, v in t.items()}
    per_step["compute"] -= per_step.get("push", 0.0)  # pushes are sent from backward's hooks
    breakdown = ", ".join(f"{k} {v:.1f} ms" for k, v in per_step.items())
    train_rate = rows_out[0]["samples/s"]
    write("e2e" + ("_quick" if args.quick else ""), "End-to-end training: Cardinal vs plain PyTorch (DeepFM, dim 16, batch 4096)",
          rows_out, [
              f"{steps} steps x {recipe.data.batch_size} samples, 26 sparse + 13 dense fields, same batches for every run",
              f"each system's sparse lr is the best of {SPARSE_LRS} by AUC on the first half of the eval split; "
              "AUC and logloss are on the second half",
              "timed scope, every run: first step to last update applied (no evaluation or checkpoint inside)",
              f"teacher AUC on the eval split: {summary['teacher_eval_auc']:.4f} (the best possible)",
              f"Cardinal step time at its best lr: {breakdown} (per step; data is in memory here)",
              f"Criteo reader: {reader_rate:,.0f} rows/s = {reader_rate / train_rate:.1f}x what training consumes ({train_rate:,.0f} samples/s)",
              f"torch runs: nn.EmbeddingBag(sparse=True), ids % {size:,}; dense Adam lr {recipe.dense_optimizer.lr} for all",
              "reproduce: python benchmarks/e2e.py",
          ], extra={"timings_ms_per_step": per_step, "reader_rows_per_s": reader_rate, "steps": steps,
                    "grid": grid_rows})


if __name__ == "__main__":
    main()
