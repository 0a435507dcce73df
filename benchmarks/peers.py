"""A peer side by side: Cardinal against DeepCTR-Torch's DeepFM, same data, model, batch and lr grid.

    python benchmarks/peers.py [--quick] [--data criteo,movielens] [--lrs 0.01,0.03] [--epochs N]

DeepCTR-Torch (the ``deepctr-torch`` package) is the most used PyTorch CTR library; it is
installed into an environment of its own on first use and trains in a child process
(``peers_env.py``, ``peers_deepctr.py``), so it never becomes a Cardinal dependency.
Like with like, on each data set:
  - the same rows: the batches Cardinal's readers yield, exported once (sparse ids label-encoded
    as DeepCTR requires, dense columns transformed as Cardinal's readers do) and trained in the
    same order by both;
  - the same model: DeepFM with the recipe's embedding dim, hidden layers and pooling; the same
    batch and epochs; Adagrad on the embeddings, Adam at the recipe's dense lr on the rest;
  - the same sparse lr grid (``e2e.SPARSE_LRS``): each system picks its best on the first half of
    the eval rows and reports AUC and logloss on the second, as e2e.py does;
  - the same timed scope: first step to last update, no evaluation inside (e2e.run_cardinal;
    the peer times its ``fit``);
  - the same load: the two systems run alternately, lr by lr, so a busy machine slows both.
Data: generated Criteo-layout rows (the default recipe's generator at a size that runs in minutes
on 2 cores) and MovieLens ml-latest-small with the ``movielens`` recipe's time split (skipped,
with the reason printed, when no copy is found), twice: ``movielens`` as the recipe stood before
its sweep (every field a row, dim 8, batch 1024), and ``movielens_shipped``, the shipped recipe
(one table a field, dim 32, batch 512, genres mean-pooled), whose user table admits no id (every
user reads zeros): the peer, whose tables admit every id, is not given that field
(``rowless_fields``). ``--peer none`` runs Cardinal's side alone.
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from e2e import SPARSE_LRS, Batches, Cached, run_cardinal  # noqa: E402
from movielens import BEFORE_SWEEP, find_copy  # noqa: E402
from peers_env import export, peer_python, run_peer  # noqa: E402
from report import write  # noqa: E402

from cardinal.data.batch import Bag, Batch  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer, tables  # noqa: E402

ROWS = {"full": (200_000, 20_000), "quick": (50_000, 10_000)}  # generated train, eval rows
COMMON = ["eval.every=0", 'train.baseline="none"', 'train.device="cpu"']
CARDINAL, PEER = "cardinal", "deepctr-torch"


def recipes(names: list[str], rows: tuple[int, int], epochs: int | None, seed: int | None = None,
            sets: tuple[str, ...] = ()) -> dict:
    """Each data set's recipe (``sets``: Cardinal's own overrides), or the reason it is skipped."""
    extra = [*COMMON, *([f"train.epochs={epochs}"] if epochs else []), *([f"train.seed={seed}"] if seed is not None else []),
             *sets]
    out = {}
    for name in names:
        if name == "criteo":
            out[name] = load("criteo_synthetic", [f"data.synthetic.rows={rows[0]}",
                                                  f"data.synthetic.eval_rows={rows[1]}", *extra])
        elif name in ("movielens", "movielens_shipped"):
            copy, before = find_copy(), BEFORE_SWEEP if name == "movielens" else []
            out[name] = (load("movielens", [f'data.train=["{copy}"]', *before, *extra]) if copy else
                         "no MovieLens copy (`cardinal data movielens`, or ../shared/data beside the checkout)")
        else:
            raise SystemExit(f"--data: unknown data set {name!r} (criteo, movielens, movielens_shipped)")
    return out


def spec(recipe) -> dict:
    """What the peer's runner needs of the recipe."""
    return {"dim": recipe.embedding.dim, "hidden": list(recipe.model.get("hidden", [])),
            "pooling": recipe.embedding.pooling, "batch_size": recipe.data.batch_size, "epochs": recipe.train.epochs,
            "dense_lr": recipe.dense_optimizer.lr,
            "initial_accumulator": recipe.sparse_optimizer.get("initial_accumulator", 0.0), "seed": recipe.train.seed}


def rowless_fields(recipe, train) -> list[str]:
    """The sparse fields whose table admits none of their ids in ``train``: a count threshold above
    every sighting the data holds, so each id reads zeros (the ``movielens`` recipe's users)."""
    admission, out = recipe.ps.memory.admission, []
    for field, table in tables.features(recipe).items():
        rule = {"policy": admission.policy, "threshold": admission.threshold, **admission.tables.get(table, {})}
        sightings = sum(len(b.sparse[field].values) for b in train.batches) * recipe.train.epochs
        if rule["policy"] == "count" and rule["threshold"] > sightings:
            out.append(field)
    return out


def rows_of(b: Batch, lo: int, hi: int) -> Batch:
    """Examples [lo, hi) of a batch."""
    return Batch(b.dense[lo:hi], {f: Bag(bag.values[bag.offsets[lo]:bag.offsets[hi]], bag.offsets[lo:hi + 1] - bag.offsets[lo])
                                  for f, bag in b.sparse.items()}, b.labels[lo:hi])


def halve(batches: list[Batch]) -> tuple[list[Batch], list[Batch]]:
    """The eval rows' first and second halves (the batch across the middle cut in two)."""
    first, second, left = [], [], sum(len(b) for b in batches) // 2
    for b in batches:
        take = min(left, len(b))
        first += [rows_of(b, 0, take)] if take else []
        second += [rows_of(b, take, len(b))] if take < len(b) else []
        left -= take
    return first, second


def compare(name: str, recipe, lrs: list[float], tmp: Path, python: Path | None) -> list[dict]:
    """Every run of the grid on one data set, the systems alternating: one dict a run."""
    assert recipe.sparse_optimizer["name"] == "adagrad", "the peer runs Adagrad on its tables"
    probe = Trainer(recipe, tmp / f"{name}-probe", progress=False)  # makes the data set (once)
    train, evaluation = Cached(probe.train_data), Cached(probe.eval_data)
    halves = [Batches(h, evaluation) for h in halve(evaluation.batches)]
    samples = sum(len(b) for b in train.batches) * recipe.train.epochs
    select_rows = sum(len(b) for b in halves[0].batches)
    folder = tmp / f"{name}-peer"
    if python is not None:
        export(folder, train, evaluation, select_rows, {**spec(recipe), "without": rowless_fields(recipe, train)})
    print(f"{name}: {samples:,} samples ({recipe.train.epochs} epoch(s), batch {recipe.data.batch_size}), "
          f"{sum(len(b) for b in evaluation.batches):,} eval rows; lrs {lrs}", flush=True)
    runs = []
    for lr in lrs:
        seconds, metrics, summary = run_cardinal(recipe, lr, tmp / name, train, halves)
        runs.append({"system": CARDINAL, "data": name, "lr": lr, "samples/s": samples / seconds,
                     "select": list(metrics[0]), "eval": list(metrics[1]),
                     "teacher AUC": summary.get("teacher_eval_auc")})
        if python is not None:
            peer = run_peer(python, folder, lr)
            runs.append({"system": PEER, "data": name, "lr": lr, "samples/s": peer["samples_per_s"],
                         "select": peer["select"], "eval": peer["eval"], "version": peer["deepctr_torch"]})
        print("  " + ", ".join(f"{r['system']} lr {lr}: AUC {r['eval'][0]:.4f}, {r['samples/s']:,.0f} samples/s"
                               for r in runs if r["lr"] == lr), flush=True)
    return runs


def table(runs: list[dict]) -> list[dict]:
    """Each system's best lr per data set (by AUC on the selection half), and Cardinal's ratios to the peer."""
    best: dict = {}
    for r in runs:
        key = (r["data"], r["system"])
        if key not in best or r["select"][0] > best[key]["select"][0]:
            best[key] = r
    rows = []
    for (data, system), r in best.items():
        peer = best.get((data, PEER))
        median = statistics.median(x["samples/s"] for x in runs if (x["data"], x["system"]) == (data, system))
        versus = system == CARDINAL and peer is not None
        rows.append({"system": system, "data": data, "best lr": r["lr"], "eval AUC": f"{r['eval'][0]:.4f}",
                     "eval logloss": r["eval"][1], "samples/s": r["samples/s"], "samples/s, grid median": median,
                     "AUC - peer": f"{r['eval'][0] - peer['eval'][0]:+.4f}" if versus else "-",
                     "x peer samples/s": r["samples/s"] / peer["samples/s"] if versus else "-"})
    return rows


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{ROWS['quick'][0]:,} generated rows, not {ROWS['full'][0]:,}")
    parser.add_argument("--data", default="criteo,movielens,movielens_shipped", help="data sets, comma-separated")
    parser.add_argument("--lrs", default=",".join(map(str, SPARSE_LRS)), help="the sparse lr grid, comma-separated")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default: each recipe's)")
    parser.add_argument("--seed", type=int, default=None, help="both systems' seed (default: each recipe's)")
    parser.add_argument("--rows", type=int, default=None, help="generated train rows (eval: a tenth, at least 4,096)")
    parser.add_argument("--note", action="append", default=[], help="a line for the table's notes (e.g. the machine's load)")
    parser.add_argument("--peer", choices=["deepctr", "none"], default="deepctr", help="none: Cardinal's side alone")
    args = parser.parse_args(argv)
    rows = ROWS["quick" if args.quick else "full"]
    if args.rows:
        rows = (args.rows, max(args.rows // 10, 4096))
    lrs = [float(x) for x in args.lrs.split(",")]
    python = peer_python() if args.peer == "deepctr" else None
    runs, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, recipe in recipes(args.data.split(","), rows, args.epochs, args.seed).items():
            if isinstance(recipe, str):
                print(f"{name}: skipped: {recipe}")
                skipped.append(f"{name} skipped: {recipe}")
                continue
            runs += compare(name, recipe, lrs, Path(tmp), python)
    if not runs:
        raise SystemExit("nothing ran")
    teacher = next((r["teacher AUC"] for r in runs if r.get("teacher AUC")), None)
    version = next((r["version"] for r in runs if "version" in r), None)
    write("peers" + ("_quick" if args.quick else ""), "A peer side by side: Cardinal vs DeepCTR-Torch (DeepFM)", table(runs), [
        f"criteo: {rows[0]:,} generated Criteo-layout rows (criteo_synthetic: dim 16, hidden 256-128, batch 1024), "
        f"{rows[1]:,} eval rows" + (f"; teacher AUC {teacher:.4f} (the best possible)" if teacher else ""),
        "movielens: ml-latest-small, the movielens recipe's time split, the recipe before its sweep (dim 8, hidden "
        "64, batch 1024, every field a row); movielens_shipped: the shipped recipe (dim 32, hidden 64, batch 512, "
        "genres mean-pooled, no user-id rows: the peer is not given the user field)",
        f"each system's sparse lr is the best of {tuple(lrs)} by AUC on the first half of the eval rows; "
        "AUC and logloss on the second half; dense: Adam at the recipe's lr on both",
        "timed: first step to last update (Cardinal: fit less evaluation and checkpoint; the peer: its fit); "
        "the two systems ran alternately, lr by lr",
        f"peer: deepctr-torch {version or '-'} in its own environment on this torch, DeepFM trained by its fit "
        "(verbose 0, no shuffling), Adagrad on its (dense) embedding tables, L2 terms 0 as in Cardinal; "
        "sparse ids label-encoded over train and eval rows",
        *args.note, *skipped, "reproduce: python benchmarks/peers.py"], extra={"grid": runs})


if __name__ == "__main__":
    main()
