"""How many embedded shards one process should run, and on how many threads: samples/s of the
default recipe at ``ps.shards`` 1, 2 and 4, and at ``ps.lanes``, side by side, the same bits. The
shipped recipes ran 4 (criteo_synthetic) and 2 (movielens) shards until this benchmark's tables
made them run 1.

    python benchmarks/embedded_shards.py [--batches 1024,4096] [--rounds 3] [--rows N] [--shards 4:4,4:1,2,1]
    python benchmarks/embedded_shards.py --recipe movielens --batches 512 --shards 2,1

A setting is ``S`` (S shards, ``ps.lanes`` at its default) or ``S:L`` (S shards on L lanes), and
``S:L:MODE`` names how one lane takes a request: ``inline`` (the default: on the sender's thread
when the lane is idle), ``handoff`` (always on the lane's thread, ``ps.inline=false``) or
``caller`` (no lanes, every request on the caller's thread, ``ps.concurrent=false``). The
embedded shards serve their pulls and pushes on lanes, threads of the worker's process; the table
kernels already split a request's ids over their own threads, so lanes and shards beyond what the
cores need only add hand-offs, and each request has a fixed cost (checks, clocks, a thread's
hand-off) that small batches of many tables feel. The default recipe (or ``--recipe movielens``, on
the MovieLens copy movielens.py finds) on the CPU at its own sparse lr, ``--rows`` generated rows
read once into memory, one warm-up run per setting (numba's compiles), then ``--rounds`` rounds of every
setting, their order reversed every other round; the timed scope is e2e.py's (first step to last
update). Every setting must reach the same eval AUC to the last digit (a row's values depend on
its id and its updates, not on which shard holds it): the benchmark fails otherwise. Writes
results/embedded_shards.{md,json} (``_movielens`` with ``--recipe movielens``; ``--name``: another name).
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from e2e import Batches, Cached, run_cardinal  # noqa: E402
from movielens import data_dir  # noqa: E402
from report import write  # noqa: E402

from cardinal.ps.transport.inprocess import default_lanes  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402



MODES = {"": [], "inline": [], "handoff": ["ps.inline=false"], "caller": ["ps.concurrent=false"]}


def setting(text: str) -> list[str]:
    """The recipe overrides of a setting, ``S``, ``S:L`` or ``S:L:MODE``."""
    shards, _, rest = text.partition(":")
    lanes, _, mode = rest.partition(":")
    if mode not in MODES:
        raise SystemExit(f"--shards: unknown mode {mode!r} in {text!r} (one of {', '.join(m for m in MODES if m)})")
    return [f"ps.shards={int(shards)}", *([f"ps.lanes={int(lanes)}"] if lanes else []), *MODES[mode]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1024,4096", help="batch sizes, comma-separated")
    parser.add_argument("--shards", default="4:4,4:1,2,1",
                        help="settings, comma-separated: S (ps.shards, default lanes), S:L (ps.shards:ps.lanes) or "
                             "S:L:MODE (MODE inline, handoff or caller)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200_000, help="generated training rows (criteo_synthetic)")
    parser.add_argument("--recipe", choices=["criteo_synthetic", "movielens"], default="criteo_synthetic")
    parser.add_argument("--name", default="", help="results/NAME.{md,json} (default embedded_shards[_movielens])")
    args = parser.parse_args(argv)
    shards = args.shards.split(",")  # the settings, as given
    data = [f'data.train=["{data_dir()}"]'] if args.recipe == "movielens" else [
        f"data.synthetic.rows={args.rows}", f"data.synthetic.eval_rows={args.rows // 10}"]
    rows, runs = [], {}
    for batch in (int(b) for b in args.batches.split(",")):
        base = [f"data.batch_size={batch}", "eval.every=0", 'train.device="cpu"', "checkpoint.minutes=0",
                *data, 'train.baseline="none"']
        recipes = {s: load(args.recipe, [*base, *setting(s)]) for s in shards}
        lr = recipes[shards[0]].sparse_optimizer["lr"]
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            probe = Trainer(recipes[shards[0]], tmp / "probe", progress=False)  # generates the data once
            train, evaluation = Cached(probe.train_data, 10**9), Cached(probe.eval_data, 1)
            probe.close()
            samples = sum(len(b) for b in train.batches)
            for s in shards:
                run_cardinal(recipes[s], lr, tmp / f"warm-{s}", Batches(train.batches[:5], train), [evaluation] * 2)
            rates, aucs = {s: [] for s in shards}, {s: set() for s in shards}
            for k in range(args.rounds):
                for s in shards if k % 2 == 0 else shards[::-1]:
                    seconds, metrics, _ = run_cardinal(recipes[s], lr, tmp / f"{s}-{k}", train, [evaluation] * 2)
                    rates[s].append(samples / seconds)
                    aucs[s].add(metrics[0][0])
                    print(f"batch {batch}, ps.shards:lanes {s}: {rates[s][-1]:,.0f} samples/s", flush=True)
        if len(set().union(*aucs.values())) != 1:
            raise SystemExit(f"batch {batch}: the settings trained different models: {aucs}")
        shipped = float(np.median(rates[shards[0]]))
        for s in shards:
            median = float(np.median(rates[s]))
            rows.append({"batch": batch, "ps.shards:lanes": s, "samples/s (median)": median,
                         f"x {shards[0]}": median / shipped,
                         "runs": ", ".join(f"{x:,.0f}" for x in rates[s]), "eval AUC": f"{aucs[s].pop():.6f}"})
        runs[batch] = {str(s): v for s, v in rates.items()}
    movielens = args.recipe == "movielens"
    what = "MovieLens ml-latest-small, its time split" if movielens else f"{args.rows:,} generated rows"
    write(args.name or "embedded_shards" + ("_movielens" if movielens else ""),
          "Embedded shards in one process: samples/s by ps.shards and ps.lanes, the same model", rows, [
        f"{args.recipe} on the CPU, {what} (one epoch), sparse lr {lr} (the recipe's), lr baseline off, "
        "no evaluation or checkpoint inside the timed scope (e2e.py's)",
        f"{args.rounds} rounds, each running every setting, the order reversed every other round; medians",
        "S:L is S shards on L lanes; S alone, ps.lanes 0: one lane per 4 cores, at most one a shard (here "
        f"{default_lanes(4)} on 4 shards); with one lane a request runs on the sender's thread when the lane is idle, "
        "except in :handoff (always the lane's thread) and :caller (no lanes: ps.concurrent=false)",
        "eval AUC: equal to the last digit for every setting (checked)",
        f"reproduce: python benchmarks/embedded_shards.py --batches {args.batches} --shards {args.shards} "
        f"--rounds {args.rounds} " + ("--recipe movielens" if movielens else f"--rows {args.rows}")
        + (f" --name {args.name}" if args.name else ""),
    ], extra={"samples_per_s": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
