"""Where a training step's time goes beyond the dense model: a ladder of loops, each adding one
layer of the embedding path to the one before, timed side by side in rounds.

    python benchmarks/step_ladder.py [--steps 40] [--rounds 3] [--rows N] [--tag T]

Same model (the default recipe's DeepFM at batch 4096), same batches (read once into memory),
same dense Adam step on every rung; each rung's ms per step minus the rung below it is what that
layer costs:

  1. dense only        the embedding input a fixed tensor, no gradient to it (e2e.py's bound);
  2. + input gradient  the fixed (B, fields, dim + 1) tensor a leaf that takes its gradient, split
                       into values and wide weights as the trainer splits them (the first layer's
                       input gradient, the FM's backward, the cat of the parts' gradients);
  3. + pooling         rows (U, dim + 1) of each batch's unique ids pooled by ``CompiledPooling``
                       (the batch's layout precomputed), its backward building the (U, dim + 1) gradient;
  4. + dedup           the layout (unique ids, inverse, offsets) computed in the step;
  5. Cardinal          the default recipe's trainer, baseline off: embedded shards (pulls, pushes,
                       the sparse optimizer), prefetch, the trainer's bookkeeping;
  6. plain PyTorch     ``nn.EmbeddingBag(sparse=True)`` (values and wide weights, ids % 4M) with sparse
                       Adagrad (``e2e.py``), at the same sparse lr;
  7. the same          its tables and Adagrad's state on transparent huge pages, as Cardinal's arenas
                       are (what a kernel with THP "always" gives it unasked; ``huge_pages.py``).

Rungs 1-4 run torch and the kernels on ``train.threads``' budget (what the trainer sets); 6 and 7
on every core, as in e2e.py. Writes results/step_ladder[_T].{md,json}.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from e2e import TORCH_TABLE_ROWS, Batches, Cached, run_cardinal, run_torch  # noqa: E402
from report import write  # noqa: E402

from cardinal.models import DeepFM  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer, threads  # noqa: E402
from cardinal.worker.layouts import layout  # noqa: E402
from cardinal.worker.pooling import CompiledPooling  # noqa: E402

RUNGS = ("1. dense only", "2. + input gradient", "3. + pooling", "4. + dedup", "5. Cardinal (embedded PS)",
         "6. plain PyTorch (EmbeddingBag + sparse Adagrad)", "7. plain PyTorch, tables on huge pages")


def dense_loop(recipe, train, fields, rung: int) -> float:
    """Seconds for rungs 1-4: DeepFM and its Adam step over the batches, the embedding input made
    as the rung says."""
    threads.apply(recipe.train.threads, embedded=True)
    torch.manual_seed(recipe.train.seed)
    dim, n_fields = recipe.embedding.dim, len(fields)
    model = DeepFM(len(train.dense_fields), n_fields, dim, **{k: v for k, v in recipe.model.items() if k != "name"})
    opt = torch.optim.Adam(model.parameters(), lr=recipe.dense_optimizer.lr, fused=True)
    rng = np.random.default_rng(0)
    fixed = torch.from_numpy(rng.standard_normal((len(train.batches[0]), n_fields, dim + 1), np.float32) * 0.01)
    layouts = [layout(b.sparse, fields, 0) for b in train.batches] if rung >= 3 else None
    # each batch's unique rows, made before the clock starts (their values do not matter here)
    tables = [torch.from_numpy(rng.standard_normal((len(u), dim + 1), np.float32)) for u, _, _ in layouts or []]
    pooling = CompiledPooling()
    start = time.perf_counter()
    for i, b in enumerate(train.batches):
        n = len(b)
        if rung == 1:
            emb, wide = fixed[:n, :, :dim], fixed[:n, :, dim]
        else:
            if rung == 2:
                rows = fixed[:n].clone().requires_grad_(True)
            else:
                unique, inverse, offsets = layouts[i] if rung == 3 else layout(b.sparse, fields, 0)
                leaf = tables[i].detach().requires_grad_(True)
                rows = pooling.pool(leaf, inverse, offsets, n_fields, False)
            values, wide = rows.split([dim, 1], -1)
            emb, wide = values, wide.squeeze(-1)
        loss = F.binary_cross_entropy_with_logits(model(b.dense, emb, wide), b.labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="steps of each timed run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each timing every rung")
    parser.add_argument("--rows", type=int, default=200_000, help="generated training rows")
    parser.add_argument("--tag", default="", help="results/step_ladder_TAG.{md,json}")
    args = parser.parse_args(argv)
    sets = ["data.batch_size=4096", "eval.every=0", 'train.baseline="none"', 'train.device="cpu"',
            "checkpoint.minutes=0", f"data.synthetic.rows={args.rows}",
            f"data.synthetic.eval_rows={max(args.rows // 10, 1000)}"]
    recipe = load("criteo_synthetic", sets)
    lr = recipe.sparse_optimizer["lr"]
    times: dict[str, list[float]] = {r: [] for r in RUNGS}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        probe = Trainer(recipe, tmp / "probe", progress=False)  # generates the data set once
        train = Cached(probe.train_data, args.steps)
        evaluation = Cached(probe.eval_data, 1)
        fields = list(probe.fields)
        probe.close()
        steps, halves = len(train.batches), [evaluation, evaluation]
        warm = Batches(train.batches[:3], train)
        runs = {RUNGS[k - 1]: (lambda data, k=k: dense_loop(recipe, data, fields, k)) for k in (1, 2, 3, 4)}
        runs[RUNGS[4]] = lambda data: run_cardinal(recipe, lr, Path(tempfile.mkdtemp(dir=tmp)), data, halves)[0]
        runs[RUNGS[5]] = lambda data: run_torch(recipe, data, halves, fields, "adagrad", lr, TORCH_TABLE_ROWS)[0]
        runs[RUNGS[6]] = lambda data: run_torch(recipe, data, halves, fields, "adagrad", lr, TORCH_TABLE_ROWS, True)[0]
        for fn in runs.values():  # numba's compiles and torch's first calls, untimed
            fn(warm)
        for r in range(args.rounds):
            order = RUNGS if r % 2 == 0 else RUNGS[::-1]  # a drifting load weighs on every rung alike
            for rung in order:
                times[rung].append(1000 * runs[rung](train) / steps)
                print(f"round {r} {rung}: {times[rung][-1]:.1f} ms a step", flush=True)
            threads.apply(recipe.train.threads, embedded=True)
    median = {r: float(np.median(v)) for r, v in times.items()}
    bound = median[RUNGS[0]]
    rows, below = [], None
    for rung in RUNGS:
        ms = median[rung]
        step_up = "" if below is None or rung in RUNGS[5:] else round(ms - below, 2)
        rows.append({"rung": rung, "ms per step (median)": ms, "added by this rung, ms": step_up,
                     "samples/s": 4096 * 1000 / ms, "x dense-only": bound / ms,
                     "runs, ms": ", ".join(f"{t:.1f}" for t in times[rung])})
        below = ms
    name = "step_ladder" + (f"_{args.tag}" if args.tag else "")
    write(name, "Where a step's time goes beyond the dense model (DeepFM, batch 4096, the CPU)", rows, [
        f"{steps} steps x 4096 samples a run, {args.rounds} rounds, every rung in each (order reversed every "
        f"other round); medians; sparse lr {lr} for Cardinal and PyTorch",
        f"rungs 1-5 on train.threads' budget ({torch.get_num_threads()} threads here), rungs 6-7 on every core "
        "(as benchmarks/e2e.py runs it)",
        "rung 5 less rung 4: the embedded shards' pulls, pushes and optimizer, and the trainer's own work",
        f"reproduce: python benchmarks/step_ladder.py --steps {args.steps} --rounds {args.rounds} --rows {args.rows}"
        + (f" --tag {args.tag}" if args.tag else ""),
    ])
    return 0


if __name__ == "__main__":
    sys.exit(main())
