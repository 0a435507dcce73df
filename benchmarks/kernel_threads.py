"""Cardinal's kernel threads beside torch's, with embedded servers: the default recipe trained with
each kernel thread count in turn, in one process, many alternated rounds.

    python benchmarks/kernel_threads.py [--kernels 2,1] [--rounds 30] [--batch 1024] [--rows N] [--steps N] [--tag T]
    python benchmarks/kernel_threads.py --recipe movielens --batch 512 --tag movielens

Every run trains the same batches (the default recipe or ``--recipe movielens``, one embedded shard,
torch at its budget), and only ``parallel.set_threads`` (and numba's count) differs, just before
``fit``; the eval AUC must be equal to the last digit (the kernels give the same bits for any thread
count). A run's samples/s moves by about 15% on a shared 2-core VM, so each round runs every count,
the order reversed every other round, and the figure is the median of the per-round ratios against
the first count.
Writes ``results/kernel_threads[_T].md`` (``train/threads.py`` cites it).
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numba
import torch

sys.path.insert(0, str(Path(__file__).parent))
from e2e import Batches, Cached, run_cardinal  # noqa: E402
from movielens import data_dir  # noqa: E402
from report import write  # noqa: E402

from cardinal import parallel  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402


def kernels(n: int):
    def apply():
        parallel.set_threads(n)
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    return apply


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", default="2,1", help="kernel thread counts, the first the baseline")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=200_000, help="generated training rows")
    parser.add_argument("--steps", type=int, default=300, help="at most this many steps a run")
    parser.add_argument("--tag", default="", help="results/kernel_threads_TAG.md")
    parser.add_argument("--recipe", choices=["criteo_synthetic", "movielens"], default="criteo_synthetic",
                        help="movielens: the copy benchmarks/movielens.py finds, its time split")
    args = parser.parse_args(argv)
    counts = [int(k) for k in args.kernels.split(",")]
    if len(counts) < 2 or min(counts) < 1 or args.rounds < 1:
        parser.error("--kernels needs two or more counts >= 1, --rounds >= 1")
    data = [f'data.train=["{data_dir()}"]'] if args.recipe == "movielens" else [
        f"data.synthetic.rows={args.rows}", f"data.synthetic.eval_rows={max(args.rows // 10, 1000)}"]
    sets = [f"data.batch_size={args.batch}", "eval.every=0", 'train.baseline="none"', "checkpoint.minutes=0",
            'train.device="cpu"', *data]
    recipe = load(args.recipe, sets)
    rates: dict[int, list[float]] = {k: [] for k in counts}
    aucs: set[float] = set()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        probe = Trainer(recipe, tmp / "probe", progress=False)  # generates the data set once
        train, evaluation = Cached(probe.train_data, args.steps), Cached(probe.eval_data, 1)
        probe.close()
        samples, lr = sum(len(b) for b in train.batches), recipe.sparse_optimizer["lr"]
        run_cardinal(recipe, lr, tmp / "warmup", Batches(train.batches[:5], train), [evaluation] * 2)
        for r in range(args.rounds):
            for k in counts if r % 2 == 0 else counts[::-1]:
                seconds, metrics, _ = run_cardinal(recipe, lr, tmp / f"r{r}-k{k}", train, [evaluation] * 2,
                                                   before_fit=kernels(k))
                rates[k].append(samples / seconds)
                aucs.add(metrics[0][0])
                print(f"round {r + 1}/{args.rounds}: {k} kernel thread(s) {samples / seconds:,.0f} samples/s",
                      flush=True)
    if len(aucs) != 1:
        raise SystemExit(f"the kernel thread count changed the model: eval AUCs {sorted(aucs)}")
    base = rates[counts[0]]
    rows = []
    for k in counts:
        ratios = [a / b for a, b in zip(rates[k], base)]
        rows.append({"kernel threads": k, "median samples/s": statistics.median(rates[k]),
                     "min / max samples/s": f"{min(rates[k]):,.0f} / {max(rates[k]):,.0f}",
                     f"median ratio vs {counts[0]}": statistics.median(ratios),
                     f"rounds faster than {counts[0]}": sum(x > 1 for x in ratios)})
    write("kernel_threads" + (f"_{args.tag}" if args.tag else ""),
          f"Kernel threads beside torch's ({args.recipe}, batch {args.batch}, embedded shard)", rows, [
        f"{args.rounds} rounds, every count each round (order reversed every other round), one process; "
        f"{len(train.batches)} steps a run; torch threads: {torch.get_num_threads()}; cores: "
        f"{parallel.available_cores()}",
        f"eval AUC {aucs.pop():.6f} in every run (the same bits for any kernel thread count)",
        f"reproduce: python benchmarks/kernel_threads.py --kernels {args.kernels} --rounds {args.rounds} "
        f"--batch {args.batch} --rows {args.rows} --steps {args.steps}" + (f" --tag {args.tag}" if args.tag else "")
        + (f" --recipe {args.recipe}" if args.recipe != "criteo_synthetic" else ""),
    ], extra={"samples_per_s": rates})
    return 0


if __name__ == "__main__":
    sys.exit(main())
