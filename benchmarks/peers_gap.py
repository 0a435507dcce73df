"""Why Cardinal's MovieLens AUC trails DeepCTR-Torch's in benchmarks/peers.py: an ablation over seeds.

    python benchmarks/peers_gap.py [--seeds 0,1,2,3] [--lr 0.01]

MovieLens as peers.py runs it (the recipe before its sweep), one sparse lr (both systems' best
there), each seed: the peer as peers.py runs it and with torch's init of its hidden layers, and
Cardinal as it ships and with each of the two ways it differs from the peer made the peer's:
  - consistency: one Cardinal process is async by default (the next batch's pull overlaps the
    step, so rows used by two consecutive batches lag one update); the peer's step is
    synchronous: ``consistency.mode = "sync"``;
  - the hidden layers' init: DeepCTR draws its DNN's weights from N(0, 1e-4), so its model starts
    as its FM and first-order parts; Cardinal keeps torch's ``nn.Linear`` init unless
    ``model.init_std`` is set.
Reports each variant's mean eval AUC (second half of the eval rows, as peers.py) over the seeds,
the AUC of every seed, and the mean's difference to the peer's. No speed figures: these runs are
about the model. Writes results/peers_gap.{md,json}.
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from e2e import Batches, Cached, run_cardinal  # noqa: E402
from peers import PEER, ROWS, halve, recipes, spec  # noqa: E402
from peers_env import export, peer_python, run_peer  # noqa: E402
from report import write  # noqa: E402

from cardinal.train import Trainer  # noqa: E402

SYNC, SMALL_INIT = 'consistency.mode="sync"', "model.init_std=0.0001"
CARDINAL = {"cardinal (as shipped: async in one process, torch's init)": (),
            "cardinal, sync": (SYNC,),
            "cardinal, hidden layers N(0, 1e-4)": (SMALL_INIT,),
            "cardinal, sync and hidden layers N(0, 1e-4)": (SYNC, SMALL_INIT)}
PEERS = {f"{PEER} (as peers.py: hidden layers N(0, 1e-4))": "deepctr", f"{PEER}, torch's init of hidden layers": "torch"}


def report(auc: dict[str, list[float]], seeds: list[int], lr: float) -> None:
    """results/peers_gap.{md,json}: each variant's mean eval AUC, its difference to the peer's, every seed's."""
    peer = statistics.mean(auc[next(iter(PEERS))])
    rows = [{"run": name, "mean eval AUC": f"{statistics.mean(a):.4f}",
             "- peer (as peers.py)": f"{statistics.mean(a) - peer:+.4f}", "per seed": " / ".join(f"{x:.4f}" for x in a)}
            for name, a in auc.items()]
    listed = ",".join(map(str, seeds))
    write("peers_gap", "Cardinal's MovieLens AUC against DeepCTR-Torch's: what makes the difference", rows, [
        f"MovieLens ml-latest-small, the recipe as benchmarks/peers.py runs it (dim 8, hidden 64, batch 1024, one "
        f"epoch), sparse Adagrad lr {lr} for both, seeds {listed} (each system's train.seed / seed)",
        "eval AUC: the second half of the eval rows, as peers.py reports",
        "cardinal, sync: consistency.mode=\"sync\" (a step's pulls see every earlier push); hidden layers N(0, 1e-4): "
        "model.init_std=0.0001, as DeepCTR's DNN (its last layer keeps torch's init in both)",
        f"reproduce: python benchmarks/peers_gap.py --seeds {listed} --lr {lr}"],
          extra={"auc": auc, "seeds": seeds, "lr": lr})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2,3", help="both systems' seeds, comma-separated")
    parser.add_argument("--lr", type=float, default=0.01, help="the sparse lr of every run")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    python = peer_python()
    auc: dict[str, list[float]] = {name: [] for name in [*CARDINAL, *PEERS]}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for seed in seeds:
            made = {name: recipes(["movielens"], ROWS["full"], None, seed, sets)["movielens"]
                    for name, sets in CARDINAL.items()}
            if any(isinstance(r, str) for r in made.values()):
                raise SystemExit(next(r for r in made.values() if isinstance(r, str)))
            first = next(iter(made.values()))
            probe = Trainer(first, tmp / f"probe-{seed}", progress=False)  # the data, read once a seed
            train, evaluation = Cached(probe.train_data), Cached(probe.eval_data)
            halves = [Batches(h, evaluation) for h in halve(evaluation.batches)]
            select_rows = sum(len(b) for b in halves[0].batches)
            for i, (name, recipe) in enumerate(made.items()):
                metrics = run_cardinal(recipe, args.lr, tmp / f"c{seed}-{i}", train, halves)[1]
                auc[name].append(float(metrics[1][0]))
            for name, init in PEERS.items():
                folder = tmp / f"peer-{seed}-{init}"
                export(folder, train, evaluation, select_rows, {**spec(first), "dnn_init": init})
                auc[name].append(float(run_peer(python, folder, args.lr)["eval"][0]))
            print(f"seed {seed}: " + ", ".join(f"{name.split(' (')[0]} {a[-1]:.4f}" for name, a in auc.items()), flush=True)
    report(auc, seeds, args.lr)
    print(json.dumps({k: round(statistics.mean(v), 4) for k, v in auc.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
