"""Row-wise Adagrad against element-wise Adagrad, each at its best lr from the same grid.

    python benchmarks/rowwise.py [--rows 200000] [--dims 16,64] [--lrs 0.01,0.03,0.1,0.3]
                                 [--optimizers adagrad,rowwise_adagrad] [--model deepfm] [--name rowwise]

The default recipe (one epoch, the lr baseline off) on --rows generated rows: one run per dim,
optimizer and lr, every other sparse setting the recipe's (initial_accumulator 1e-6 for both:
``--set sparse_optimizer.name=...`` starts another optimizer from its own defaults, whose 0 would
set an undamped row-wise Adagrad against the recipe's damped Adagrad). The table gives every run
and, per dim, each optimizer's best lr and the gap; results/<name>.md and .json (and each run as it
ends in <name>.runs.json, which ``--resume`` goes on from). ``--before NAME``
adds a column from results/NAME.json: the same runs of another commit (``rowwise_before``: the
command with ``--optimizers rowwise_adagrad --name rowwise_before`` at 4b2ae46, before the wide
part's weight had an accumulator of its own). What the same optimizers reach in a plain PyTorch
loop on the same batches: ``rowwise_trace.py --auc``.
"""

import json

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report import RESULTS, write  # noqa: E402

from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402


def run(args, dim: int, optimizer: str, lr: str) -> dict:
    r = load("criteo_synthetic", [f"data.synthetic.rows={args.rows}", f"embedding.dim={dim}",
                                  f'model.name="{args.model}"', 'train.baseline="none"',
                                  f'sparse_optimizer.name="{optimizer}"', f"sparse_optimizer.lr={lr}",
                                  "sparse_optimizer.initial_accumulator=1e-6", *args.set])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(r, Path(tmp) / "run", progress=False)
        s = trainer.fit()
        trainer.close()
    return {"dim": dim, "optimizer": optimizer, "lr": float(lr), "auc": round(s["eval_auc"], 4),
            "logloss": round(s["eval_logloss"], 4)}


def table(rows: list[dict], before: dict) -> list[dict]:
    """The rows as printed: AUC and logloss to 4 places, and the --before run's AUC where it has one."""
    out = []
    for r in sorted(rows, key=lambda r: (r["dim"], r["optimizer"], r["lr"])):
        row = {"dim": r["dim"], "optimizer": r["optimizer"], "lr": f"{r['lr']:g}", "eval AUC": f"{r['auc']:.4f}",
               "logloss": f"{r['logloss']:.4f}"}
        if before:
            was = before.get((r["dim"], r["optimizer"], r["lr"]))
            row["AUC before"] = "" if was is None else f"{was:.4f}"
        out.append(row)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--dims", default="16,64")
    p.add_argument("--lrs", default="0.01,0.03,0.1,0.3")
    p.add_argument("--optimizers", default="adagrad,rowwise_adagrad")
    p.add_argument("--model", default="deepfm")
    p.add_argument("--set", action="append", default=[], help="a recipe override, KEY=VALUE")
    p.add_argument("--name", default="rowwise", help="results/<name>.md and .json")
    p.add_argument("--before", default="", help="results/<before>.json: its AUCs as a column")
    p.add_argument("--resume", action="store_true", help="keep the runs results/<name>.runs.json holds")
    args = p.parse_args()
    before = {}
    if args.before:
        saved = json.loads((RESULTS / f"{args.before}.json").read_text())
        before = {(r["dim"], r["optimizer"], r["lr"]): r["auc"] for r in saved.get("runs", saved["rows"])}
    done = RESULTS / f"{args.name}.runs.json"  # each run as it ends: a rerun goes on where one stopped
    rows = json.loads(done.read_text()) if args.resume and done.exists() else []
    for dim in map(int, args.dims.split(",")):
        for optimizer in args.optimizers.split(","):
            for lr in args.lrs.split(","):
                if not any((r["dim"], r["optimizer"], r["lr"]) == (dim, optimizer, float(lr)) for r in rows):
                    rows.append(run(args, dim, optimizer, lr))
                    done.write_text(json.dumps(rows, indent=1))
                    print(rows[-1], flush=True)
    notes = []
    for dim in sorted({r["dim"] for r in rows}):
        best = {o: max((r for r in rows if r["dim"] == dim and r["optimizer"] == o), key=lambda r: r["auc"])
                for o in args.optimizers.split(",")}
        line = ", ".join(f"{o} {b['auc']:.4f} at lr {b['lr']:g}" for o, b in best.items())
        if {"adagrad", "rowwise_adagrad"} <= set(best):
            line += f"; row-wise - Adagrad {best['rowwise_adagrad']['auc'] - best['adagrad']['auc']:+.4f}"
        notes.append(f"dim {dim}, best: {line}")
    acc0 = next((s.split("=", 1)[1] for s in reversed(args.set) if s.startswith("sparse_optimizer.initial_accumulator=")),
                "1e-6")
    if before:
        was = {d: max(a for (dd, o, _), a in before.items() if dd == d and o == "rowwise_adagrad")
               for d in {d for d, o, _ in before if o == "rowwise_adagrad"}}
        notes += [f"AUC before: results/{args.before}.json; dim {d}, best row-wise {a:.4f}" for d, a in sorted(was.items())]
    write(args.name, f"Row-wise Adagrad against Adagrad, each at its best lr ({args.model}, {args.rows:,} rows)",
          table(rows, before), notes, extra={"runs": rows},
          header=[f"`python benchmarks/rowwise.py --rows {args.rows} --dims {args.dims} --lrs {args.lrs} "
                  f"--optimizers {args.optimizers} --model {args.model}"
                  + "".join(f" --set {s}" for s in args.set) + f" --name {args.name}"
                  + (f" --before {args.before}" if args.before else "") + "`",
                  f"one epoch, train.baseline = none, sparse_optimizer.initial_accumulator = {acc0}, "
                  "the recipe's consistency (async, staleness 1, in one process)"])


if __name__ == "__main__":
    main()
