"""The dense optimizer's path on the CPU: torch's fused kernel (what ``builder.dense_optimizer``
takes) against its foreach path (what it took before) and the per-parameter loop.

    python benchmarks/dense_optimizer.py [--rounds 6] [--rows 200000]

Two tables, the shipped recipes (criteo_synthetic at ``--rows`` generated rows, and movielens on
the copy movielens.py finds, skipped without one), each on the CPU at its recipe's own lrs:

- a step of the recipe's dense optimizer over its model's parameters (random gradients), us, at
  the trainer's thread budget: median of ``--rounds`` rounds of 300 steps, the paths taking turns;
- samples/s of a whole run (e2e.py's timed scope, one warm-up run a path, then ``--rounds`` runs
  a path, their order reversed every other round), the run's eval AUC beside it: the fused kernel
  rounds an ulp here and there differently from the others, so the AUC may move in its last digits.

Writes results/dense_optimizer.{md,json} (the steps) and results/dense_optimizer_runs.{md,json} (the runs).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from e2e import Batches, Cached, run_cardinal  # noqa: E402
from movielens import find_copy  # noqa: E402
from report import write  # noqa: E402

from cardinal.recipe import load  # noqa: E402
from cardinal.recipe.dense_optimizer import DENSE_OPTIMIZERS  # noqa: E402
from cardinal.train import Trainer, builder  # noqa: E402

PATHS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}
COMMON = ["eval.every=0", 'train.baseline="none"', 'train.device="cpu"', "checkpoint.minutes=0"]


def on_path(path: str):
    """``builder.dense_optimizer`` as it is, but on ``path``."""
    def make(recipe, model, world):
        d = recipe.dense_optimizer
        return getattr(torch.optim, DENSE_OPTIMIZERS[d.name])(list(model.parameters()),
                                                              lr=builder.dense_lr(recipe, world),
                                                              weight_decay=d.weight_decay, **PATHS[path])
    return make


def step_us(params: list[torch.Tensor], recipe, path: str, steps: int = 300) -> float:
    """Microseconds a step of the recipe's dense optimizer on ``path``, over copies of ``params``."""
    model = torch.nn.Module()
    model.params = torch.nn.ParameterList([p.detach().clone() for p in params])
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    optimizer = on_path(path)(recipe, model, 1)
    for _ in range(20):
        optimizer.step()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - start) / steps * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--rows", type=int, default=200_000, help="generated training rows (criteo_synthetic)")
    args = parser.parse_args(argv)
    recipes = {"criteo_synthetic": load("criteo_synthetic", [f"data.synthetic.rows={args.rows}",
                                                             f"data.synthetic.eval_rows={args.rows // 10}", *COMMON])}
    if copy := find_copy():
        recipes["movielens"] = load("movielens", [f'data.train=["{copy}"]', *COMMON])
    steps, runs, real = [], [], builder.dense_optimizer
    try:
        for name, recipe in recipes.items():
            lr = recipe.sparse_optimizer["lr"]
            with tempfile.TemporaryDirectory() as tmp:
                tmp = Path(tmp)
                probe = Trainer(recipe, tmp / "probe", progress=False)
                train, evaluation = Cached(probe.train_data, 10**9), Cached(probe.eval_data)
                params, threads = list(probe.model.parameters()), torch.get_num_threads()
                probe.close()
                us = {p: statistics.median(step_us(params, recipe, p) for _ in range(args.rounds)) for p in PATHS}
                for p in PATHS:
                    steps.append({"recipe": name, "optimizer": recipe.dense_optimizer.name, "path": p,
                                  "parameters": sum(x.numel() for x in params), "threads": threads,
                                  "us a step": us[p], "x fused": us[p] / us["fused"]})
                halves = [evaluation, evaluation]
                samples = sum(len(b) for b in train.batches)
                rates, aucs = {p: [] for p in ("foreach", "fused")}, {}
                for p in rates:  # numba's compiles and torch's first calls
                    builder.dense_optimizer = on_path(p)
                    run_cardinal(recipe, lr, tmp / f"warm-{p}", Batches(train.batches[:5], train), halves)
                for k in range(args.rounds):
                    for p in list(rates) if k % 2 == 0 else list(rates)[::-1]:
                        builder.dense_optimizer = on_path(p)
                        seconds, metrics, _ = run_cardinal(recipe, lr, tmp / f"{p}-{k}", train, halves)
                        rates[p].append(samples / seconds)
                        aucs[p] = metrics[0][0]
                        print(f"{name}, {p}: {rates[p][-1]:,.0f} samples/s", flush=True)
                base = statistics.median(rates["foreach"])
                for p, r in rates.items():
                    runs.append({"recipe": name, "path": p, "samples/s (median)": statistics.median(r),
                                 "x foreach": statistics.median(r) / base, "runs": ", ".join(f"{x:,.0f}" for x in r),
                                 "eval AUC": f"{aucs[p]:.6f}"})
    finally:
        builder.dense_optimizer = real
    notes = [f"{args.rounds} rounds; the paths take turns, the order reversed every other round; medians",
             "us a step: the recipe's dense optimizer over its model's parameters, random gradients",
             "whole runs: the recipe on the CPU at its own lrs, one epoch, lr baseline off, e2e.py's timed scope",
             "movielens: the shipped recipe on the MovieLens copy movielens.py finds" if "movielens" in recipes else
             "movielens skipped: no MovieLens copy",
             f"reproduce: python benchmarks/dense_optimizer.py --rounds {args.rounds} --rows {args.rows}"]
    write("dense_optimizer", "The dense optimizer on the CPU: torch's fused kernel, foreach, the loop",
          steps, notes[:2] + notes[3:], extra={"runs": runs})
    write("dense_optimizer_runs", "Whole runs with the dense optimizer fused and foreach", runs, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
