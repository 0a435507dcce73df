"""What the `lr` baseline costs: samples/s of the default recipe with ``train.baseline = "lr"``
against ``"none"``, in one process, the two alternated, with the trainer's per-step phases.

    python benchmarks/baseline_cost.py [--steps 40] [--repeats 3] [--rows N] [--tag T] [--note TEXT]

The default recipe at batch 4096 on the CPU, embedded shards, no evaluation or checkpoint by time;
the batches read once into memory and shared by every run; one untimed warm-up run of each first
(numba's compiles); then ``--repeats`` rounds, each running both configurations, their order
swapped every round, so a load that drifts (a shared machine) weighs on both alike. Reported:
medians over the rounds of samples/s and of each phase's ms per step (the trainer's ``timings``,
the model collection's and the baseline collection's), and the baseline's share: the median over
the rounds of 1 - samples/s with it / samples/s without (a round's two runs are close in time,
so a load that changes between rounds cancels). Writes results/baseline_cost[_T].{md,json}.
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from e2e import Batches, Cached, run_cardinal  # noqa: E402
from report import write  # noqa: E402

from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402

CONFIGS = ("none", "lr")


def phases(trainer, steps: int) -> dict[str, float]:
    """ms per step of each timed phase: the trainer's, the model collection's, the baseline's."""
    out = {f"trainer {k}": v for k, v in trainer.timings.items()}
    out |= {f"model {k}": v for k, v in trainer.embedding.timings.items()}
    if trainer.baseline is not None:
        out |= {f"baseline {k}": v for k, v in trainer.baseline.embedding.timings.items()}
    return {k: 1000 * v / steps for k, v in out.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="steps of each timed run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, each timing both configurations")
    parser.add_argument("--rows", type=int, default=200_000, help="generated training rows")
    parser.add_argument("--tag", default="", help="results/baseline_cost_TAG.{md,json}")
    parser.add_argument("--note", default="", help="a line added to the notes (e.g. which code ran)")
    args = parser.parse_args(argv)
    sets = ["data.batch_size=4096", "eval.every=0", 'train.device="cpu"', "checkpoint.minutes=0",
            f"data.synthetic.rows={args.rows}", f"data.synthetic.eval_rows={max(args.rows // 10, 1000)}"]
    recipes = {c: load("criteo_synthetic", [*sets, f'train.baseline="{c}"']) for c in CONFIGS}
    rates: dict[str, list[float]] = {c: [] for c in CONFIGS}
    timed: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        probe = Trainer(recipes["none"], tmp / "probe", progress=False)  # generates the data set once
        train = Cached(probe.train_data, args.steps)
        evaluation = Cached(probe.eval_data, 1)
        probe.close()
        steps, samples = len(train.batches), sum(len(b) for b in train.batches)
        lr, halves = recipes["none"].sparse_optimizer["lr"], [evaluation, evaluation]
        for c in CONFIGS:
            run_cardinal(recipes[c], lr, tmp / f"warmup-{c}", Batches(train.batches[:5], train), halves)
        for r in range(args.repeats):
            for c in CONFIGS if r % 2 == 0 else CONFIGS[::-1]:
                seen = {}
                seconds = run_cardinal(recipes[c], lr, tmp / f"{c}-{r}", train, halves,
                                       on_trainer=lambda t: seen.update(phases(t, steps)))[0]
                rates[c].append(samples / seconds)
                timed[c].append({**seen, "whole step": 1000 * seconds / steps})
                print(f"round {r} baseline {c}: {rates[c][-1]:,.0f} samples/s", flush=True)
    median = {c: float(np.median(v)) for c, v in rates.items()}
    shares = [1 - lr / none for none, lr in zip(rates["none"], rates["lr"])]  # each round's two runs, side by side
    share = float(np.median(shares))
    names = list(dict.fromkeys(k for c in CONFIGS for t in timed[c] for k in t))
    rows = [{"ms per step (median)": k, **{f"baseline {c}": float(np.median([t.get(k, 0.0) for t in timed[c]]))
                                            for c in CONFIGS}} for k in names]
    rows.append({"ms per step (median)": "samples/s", **{f"baseline {c}": median[c] for c in CONFIGS}})
    rows.append({"ms per step (median)": "baseline's share of samples/s (median of rounds)", "baseline none": "",
                 "baseline lr": f"{100 * share:.1f}%"})
    write("baseline_cost" + (f"_{args.tag}" if args.tag else ""),
          "What the lr baseline costs: the default recipe with train.baseline \"lr\" against \"none\"", rows, [
              f"criteo_synthetic at batch 4096 on the CPU, {steps} steps a run, {args.repeats} rounds alternating the "
              f"two (order swapped every round), medians; threads: {torch.get_num_threads()}",
              "samples/s runs: " + "; ".join(f"{c}: " + ", ".join(f"{x:,.0f}" for x in rates[c]) for c in CONFIGS),
              "the baseline's share of each round (1 - lr / none of its two runs): "
              + ", ".join(f"{100 * x:.1f}%" for x in shares),
              *([args.note] if args.note else []),
              "phases overlap (trainer compute holds the hooks' pushes; trainer baseline holds the baseline "
              "collection's phases)",
              f"reproduce: python benchmarks/baseline_cost.py --steps {args.steps} --repeats {args.repeats} "
              f"--rows {args.rows}" + (f" --tag {args.tag}" if args.tag else ""),
          ], extra={"samples_per_s": rates, "phases": timed, "shares": shares, "share": share})
    return 0


if __name__ == "__main__":
    sys.exit(main())
