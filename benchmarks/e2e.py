"""End-to-end training throughput and AUC: Cardinal against plain PyTorch, side by side.

    python benchmarks/e2e.py [--quick] [--steps N]

Same model (DeepFM), same generated data (26 sparse + 13 dense fields), same batch size,
same number of steps, batches read into memory once and shared by every run:
  - cardinal:            the default recipe's trainer (embedded parameter server, prefetch);
  - torch adagrad:       what a user does without Cardinal: ``nn.EmbeddingBag(sparse=True)``
                         tables sized by the hashing trick (id % size), sparse Adagrad;
  - torch sparseadam:    the same with ``SparseAdam``;
  - dense-only bound:    the same model and steps with the embedding output replaced by a
                         precomputed tensor (training if embeddings were free).
Also: where Cardinal's step time goes, and the Criteo reader's rows/s against the rate
training consumes rows.
"""

import argparse
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
from report import write  # noqa: E402

from cardinal.data import CriteoReader  # noqa: E402
from cardinal.models import DeepFM  # noqa: E402
from cardinal.train import Trainer, config  # noqa: E402
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


def evaluate(logits_fn, batches):
    logits, labels = [], []
    with torch.no_grad():
        for b in batches:
            logits.append(logits_fn(b))
            labels.append(b.labels)
    logit, label = torch.cat(logits), torch.cat(labels)
    return float(binary_auroc(logit, label.long())), float(F.binary_cross_entropy_with_logits(logit, label))


def run_torch(recipe, train, evaluation, fields, sparse_opt: str, size: int):
    torch.manual_seed(recipe.train.seed)
    dim = recipe.embedding.dim
    model = DeepFM(len(train.dense_fields), len(fields), dim, **{k: v for k, v in recipe.model.items() if k != "name"})
    deep, wide = HashedEmbeddings(fields, size, dim), HashedEmbeddings(fields, size, 1)
    nn.init.zeros_(wide.bag.weight)
    sparse_params = [deep.bag.weight, wide.bag.weight]
    if sparse_opt == "adagrad":
        sopt = torch.optim.Adagrad(sparse_params, lr=recipe.sparse_optimizer.get("lr", 0.05))
    else:
        sopt = torch.optim.SparseAdam(sparse_params, lr=1e-3)
    dopt = torch.optim.Adam(model.parameters(), lr=recipe.dense_optimizer.lr)

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
    return seconds, evaluate(logits, evaluation)


def run_dense_only(recipe, train, fields):
    torch.manual_seed(recipe.train.seed)
    dim = recipe.embedding.dim
    model = DeepFM(len(train.dense_fields), len(fields), dim, **{k: v for k, v in recipe.model.items() if k != "name"})
    opt = torch.optim.Adam(model.parameters(), lr=recipe.dense_optimizer.lr)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small data set and few steps")
    parser.add_argument("--steps", type=int, default=0, help="steps per run (default: one epoch)")
    args = parser.parse_args()
    sets = ["data.synthetic.rows=200000", "data.synthetic.eval_rows=20000"] if args.quick else []
    recipe = config.load("criteo_synthetic", sets)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(recipe, Path(tmp) / "run", progress=False)
        train_path = synthetic_dir(recipe.data) / "train.tsv"
        start = time.perf_counter()
        rows = sum(len(b) for b in CriteoReader([train_path], recipe.data.batch_size))
        reader_rate = rows / (time.perf_counter() - start)
        train = Cached(trainer.train_data, args.steps or None)
        evaluation = Cached(trainer.eval_data)
        trainer.train_data, trainer.eval_data = train, evaluation
        fields = trainer.fields
        steps, samples = len(train.batches), sum(len(b) for b in train.batches)
        print(f"{steps} steps of {recipe.data.batch_size} on {recipe.data.synthetic.rows:,} generated rows; running...")

        dense_s = run_dense_only(recipe, train, fields)
        summary = trainer.fit()
        size = 1 << 22
        results = [("cardinal", summary["train_seconds"], (summary["eval_auc"], summary["eval_logloss"]))]
        for opt in ("adagrad", "sparseadam"):
            seconds, metrics = run_torch(recipe, train, evaluation, fields, opt, size)
            results.append((f"torch {opt} (hashed to {size:,})", seconds, metrics))

    rows_out = [{"run": name, "samples/s": samples / s, "x dense-only bound": dense_s / s,
                 "eval AUC": auc, "eval logloss": ll} for name, s, (auc, ll) in results]
    rows_out.append({"run": "dense-only bound", "samples/s": samples / dense_s, "x dense-only bound": 1.0,
                     "eval AUC": float("nan"), "eval logloss": float("nan")})
    t = summary["timings_s"]
    per_step = {k: 1000 * v / steps for k, v in t.items()}
    per_step["compute"] -= per_step.get("push", 0.0)  # pushes are sent from backward's hooks
    breakdown = ", ".join(f"{k} {v:.1f} ms" for k, v in per_step.items())
    train_rate = samples / summary["train_seconds"]
    write("e2e" + ("_quick" if args.quick else ""), "End-to-end training: Cardinal vs plain PyTorch (DeepFM, dim 16, batch 4096)",
          rows_out, [
              f"{steps} steps x {recipe.data.batch_size} samples, 26 sparse + 13 dense fields, same batches for every run",
              f"teacher AUC on the eval split: {summary['teacher_eval_auc']:.4f} (the best possible)",
              f"Cardinal step time: {breakdown} (per step; data is in memory here)",
              f"Criteo reader: {reader_rate:,.0f} rows/s = {reader_rate / train_rate:.1f}x what training consumes ({train_rate:,.0f} samples/s)",
              f"torch runs: nn.EmbeddingBag(sparse=True), ids % {size:,}; dense Adam lr {recipe.dense_optimizer.lr}",
              "reproduce: python benchmarks/e2e.py",
          ], extra={"timings_ms_per_step": per_step, "reader_rows_per_s": reader_rate, "steps": steps})


if __name__ == "__main__":
    main()
