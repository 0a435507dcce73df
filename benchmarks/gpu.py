"""Cardinal on a GPU beside plain PyTorch on the same GPU: samples/s and eval AUC.

    python benchmarks/gpu.py                       # one CUDA device; results/gpu.md
    python benchmarks/gpu.py --device cpu --steps 20 --rows 20000 --batch 512   # a smoke run anywhere

Same model (DeepFM, the default recipe), same generated batches (read into memory once), same
steps, batch 4096 by default:
  - cardinal:               the trainer with train.device = the device; embedded servers on the
                            host's cores; unbounded, collisionless tables; rows staged per step;
  - torch sparse, on GPU:   ``nn.EmbeddingBag(sparse=True)`` tables by the hashing trick
                            (id % 2^22) + sparse Adagrad, dense Adam; batches already on the device;
  - torch sparse, H2D:      the same, each batch copied host to device every step (pinned,
                            non-blocking), as a user's data loader does;
  - torch dense grad:       a dense-gradient EmbeddingBag and one fused Adam over everything;
  - dense-only bound:       the model alone on precomputed embeddings (training if embeddings
                            were free).
Fairness: the torch baselines' sparse lr is the best of ``SPARSE_LRS`` by AUC on the first half
of the eval split (Cardinal's is the recipe's, tuned by the sweep; ``--tune-cardinal`` grids it
too); AUC is reported on the second half. Every run is timed from its first step to its last
update applied (CUDA synchronised), with no evaluation or checkpoint inside, after ``--warmup``
untimed steps of each kind (else the first run timed pays numba's compiles on a fresh machine,
and the dense-only run cuBLAS's start).
Without a CUDA device (and without ``--device cpu``) it prints one line saying so and exits 0.
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
import report  # noqa: E402
from e2e import Batches, Cached, run_cardinal  # noqa: E402

from cardinal.models import DeepFM  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402

SPARSE_LRS = (0.01, 0.03, 0.1)
TABLE_ROWS = 1 << 22


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class OnDevice:
    """A batch's hashed ids (values % size, one concatenated bag list), offsets, dense, labels."""

    def __init__(self, batch, fields, size, device, pin=False):
        values, offsets, base = [], [], 0
        for f in fields:
            b = batch.sparse[f]
            values.append(b.values % size)
            offsets.append(b.offsets[:-1] + base)
            base += len(b.values)
        offsets.append(np.array([base]))
        parts = (torch.from_numpy(np.concatenate(values)), torch.from_numpy(np.concatenate(offsets)),
                 batch.dense, batch.labels)
        if pin:  # host copies, pinned, for the per-step H2D run
            self.host = [p.pin_memory() for p in parts]
            self.parts = None
        else:
            self.parts = [p.to(device) for p in parts]
        self.n_fields, self.device = len(fields), device

    def get(self):
        if self.parts is not None:
            return self.parts
        return [p.to(self.device, non_blocking=True) for p in self.host]


def bag(table: nn.EmbeddingBag, ids, offsets, n_fields):
    out = table(ids, offsets)
    return out.view(n_fields, -1, out.shape[1]).transpose(0, 1)  # (B, fields, dim)


def run_torch(recipe, train, halves, fields, device, lr, sparse: bool, h2d: bool, table_rows: int = TABLE_ROWS):
    """(seconds, [(AUC, logloss) per eval half]) for plain PyTorch on ``device``."""
    torch.manual_seed(recipe.train.seed)
    dim = recipe.embedding.dim
    spec = {k: v for k, v in recipe.model.items() if k != "name"}
    model = DeepFM(len(train.dense_fields), len(fields), dim, **spec).to(device)
    deep = nn.EmbeddingBag(table_rows, dim, mode="sum", sparse=sparse, include_last_offset=True).to(device)
    wide = nn.EmbeddingBag(table_rows, 1, mode="sum", sparse=sparse, include_last_offset=True).to(device)
    nn.init.uniform_(deep.weight, -0.01, 0.01)
    nn.init.zeros_(wide.weight)
    fused = True  # torch has fused Adam on the CPU too (as Cardinal's dense optimizer)
    if sparse:
        opts = [torch.optim.Adagrad([deep.weight, wide.weight], lr=lr),
                torch.optim.Adam(model.parameters(), lr=recipe.dense_optimizer.lr, fused=fused)]
    else:  # one fused Adam over tables and model: the dense-gradient baseline
        opts = [torch.optim.Adam([{"params": [deep.weight, wide.weight], "lr": lr},
                                  {"params": model.parameters(), "lr": recipe.dense_optimizer.lr}], fused=fused)]
    n = len(fields)
    staged = [OnDevice(b, fields, table_rows, device, pin=h2d and device.type == "cuda") for b in train]

    def logits(ids, offsets, dense):
        return model(dense, bag(deep, ids, offsets, n), bag(wide, ids, offsets, n).squeeze(2))

    sync(device)
    start = time.perf_counter()
    for s in staged:
        ids, offsets, dense, labels = s.get()
        loss = F.binary_cross_entropy_with_logits(logits(ids, offsets, dense), labels)
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for o in opts:
            o.step()
    sync(device)
    seconds = time.perf_counter() - start
    model.eval()
    results = []
    with torch.no_grad():
        for half in halves:
            out, labels = [], []
            for b in half:
                ids, offsets, dense, label = OnDevice(b, fields, table_rows, device).get()
                out.append(logits(ids, offsets, dense).float().cpu())
                labels.append(b.labels)
            logit, label = torch.cat(out), torch.cat(labels)
            results.append((float(binary_auroc(logit, label.long())),
                            float(F.binary_cross_entropy_with_logits(logit, label))))
    return seconds, results


def run_dense_only(recipe, train, fields, device) -> float:
    torch.manual_seed(recipe.train.seed)
    dim = recipe.embedding.dim
    model = DeepFM(len(train.dense_fields), len(fields), dim,
                   **{k: v for k, v in recipe.model.items() if k != "name"}).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=recipe.dense_optimizer.lr, fused=True)
    batches = [(b.dense.to(device), b.labels.to(device)) for b in train]
    emb = torch.randn(len(batches[0][1]), len(fields), dim, device=device) * 0.01
    wide = torch.zeros(len(batches[0][1]), len(fields), device=device)
    sync(device)
    start = time.perf_counter()
    for dense, labels in batches:
        k = len(labels)
        loss = F.binary_cross_entropy_with_logits(model(dense, emb[:k], wide[:k]), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync(device)
    return time.perf_counter() - start


def best_of(runs: dict) -> tuple[float, tuple[float, list]]:
    """The lr whose AUC on the first eval half is best, with its (seconds, metrics)."""
    lr = max(runs, key=lambda k: runs[k][1][0][0])
    return lr, runs[lr]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=0, help="steps per run (default: one epoch)")
    parser.add_argument("--rows", type=int, default=0, help="generated training rows (default: the recipe's)")
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--table-rows", type=int, default=TABLE_ROWS, help="rows of the torch runs' hashed tables")
    parser.add_argument("--warmup", type=int, default=5,
                        help="untimed steps of every kind of run first, so no run pays the process's first compiles")
    parser.add_argument("--tune-cardinal", action="store_true", help="grid Cardinal's sparse lr as the baselines'")
    parser.add_argument("--results", default=str(report.RESULTS), help="where gpu.md / gpu.json go")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA device here (torch.cuda.is_available() is False); nothing measured "
              "(--device cpu runs a smoke test)")
        return 0
    device = torch.device(args.device)
    sets = [f"data.batch_size={args.batch}", "eval.every=0", 'train.baseline="none"',
            f'train.device="{args.device}"', "checkpoint.minutes=0"]
    if args.rows:
        sets += [f"data.synthetic.rows={args.rows}", f"data.synthetic.eval_rows={max(args.rows // 10, 1000)}"]
    recipe = load("criteo_synthetic", sets)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        probe = Trainer(recipe, tmp / "probe", progress=False)  # generates the data set once
        train = Cached(probe.train_data, args.steps or None)
        evaluation = Cached(probe.eval_data)
        half = max(len(evaluation.batches) // 2, 1)
        halves = [Batches(evaluation.batches[:half], evaluation), Batches(evaluation.batches[half:] or
                                                                          evaluation.batches[:half], evaluation)]
        fields, steps = probe.fields, len(train.batches)
        samples = sum(len(b) for b in train.batches)
        probe.close()
        print(f"{steps} steps of {args.batch} on {device}; running...")
        if args.warmup:  # untimed: numba's first compiles, cuBLAS's handles, CUDA's lazily loaded kernels
            few = Batches(train.batches[:args.warmup], train)
            little = [Batches(h.batches[:1], h) for h in halves]
            run_dense_only(recipe, few, fields, device)
            run_cardinal(recipe, recipe.sparse_optimizer["lr"], tmp / "warmup", few, little)
            for sparse, h2d in ((True, False), (True, True), (False, False)):
                run_torch(recipe, few, little, fields, device, SPARSE_LRS[0], sparse, h2d, args.table_rows)
        dense_s = run_dense_only(recipe, train, fields, device)
        lrs = SPARSE_LRS if args.tune_cardinal else (recipe.sparse_optimizer["lr"],)
        cardinal = {lr: run_cardinal(recipe, lr, tmp, train, halves) for lr in lrs}
        c_lr, (c_s, c_metrics, c_summary) = max(cardinal.items(), key=lambda kv: kv[1][1][0][0])
        rows = [{"run": f"Cardinal, train.device={args.device}, embedded servers", "sparse lr": c_lr,
                 "samples/s": samples / c_s, "eval AUC": c_metrics[1][0],
                 "h2d bytes/step": c_summary.get("h2d_bytes_per_step", 0.0),
                 "input wait share": c_summary.get("input_wait_share", 0.0)}]
        for name, sparse, h2d in (("torch EmbeddingBag(sparse) + Adagrad, batches on device", True, False),
                                  ("the same, batches copied host to device each step", True, True),
                                  ("torch dense-grad EmbeddingBag + fused Adam", False, False)):
            runs = {lr: run_torch(recipe, train, halves, fields, device, lr, sparse, h2d, args.table_rows)
                    for lr in SPARSE_LRS}
            lr, (s, metrics) = best_of(runs)
            rows.append({"run": name, "sparse lr": lr, "samples/s": samples / s, "eval AUC": metrics[1][0],
                         "h2d bytes/step": float("nan"), "input wait share": float("nan")})
        rows.append({"run": "dense-only bound", "sparse lr": "-", "samples/s": samples / dense_s,
                     "eval AUC": float("nan"), "h2d bytes/step": float("nan"), "input wait share": float("nan")})
    best_torch = max(r["samples/s"] for r in rows[1:3])
    name = "gpu" if device.type == "cuda" else "gpu_smoke_cpu"
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none (CPU smoke run)"
    report.RESULTS = Path(args.results)
    report.write(name, f"Cardinal on {device.type.upper()} beside plain PyTorch (DeepFM, batch {args.batch})", rows, [
        f"{steps} steps x {args.batch} samples, same batches for every run; GPU: {gpu}",
        f"Cardinal / best plain PyTorch sparse run: {rows[0]['samples/s'] / best_torch:.2f}x "
        f"(target on one H100: >= 0.3x and >= 250,000 samples/s)",
        f"torch tables: ids % {args.table_rows:,} (bounded, colliding); Cardinal's: unbounded, collisionless",
        f"baselines' sparse lr: best of {SPARSE_LRS} on the first eval half; AUC on the second half",
        "reproduce: python benchmarks/gpu.py",
    ], extra={"steps": steps, "device": str(device), "cardinal_summary": {k: v for k, v in c_summary.items()
                                                                         if isinstance(v, (int, float))}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
