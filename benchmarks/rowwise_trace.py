"""Cardinal's sparse updates step by step against a plain PyTorch loop on the same batches.

    python benchmarks/rowwise_trace.py [--model deepfm] [--optimizer rowwise_adagrad] [--steps 12]
                                       [--variant rowwise_own] [--set KEY=VALUE ...]
    python benchmarks/rowwise_trace.py --auc [--model dlrm] [--variant rowwise_own,adagrad] [--lrs 0.03,0.3]

Trace: Cardinal trains the recipe (200k generated rows, sync, one worker, no lr baseline) from the
same dense weights as ``plain_loop.PlainLoop``; after each step every row the batch touched is read
back from the servers (values and optimizer state) and compared with the plain loop's. A line a step:
the loss of each, the new rows, the largest differences of values and state, and the learning rate
each row received (lr / (sqrt(s) + eps): median over the new rows; median and least (the hottest
rows) over rows seen before, for the values and for the last column, a wide part's weight), Adagrad's at the recipe's lr and initial_accumulator
(--set to change them). Then, over the traced steps, how the plain loop's gradient energy spreads
over the row's columns.

--auc: the plain loop alone, one epoch per variant and lr, AUC and logloss on the eval split: what
the optimizers reach without Cardinal, to set Cardinal's figures against (``rowwise.py``).
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from plain_loop import VARIANTS, PlainLoop  # noqa: E402

from cardinal.recipe import load  # noqa: E402
from cardinal.train import Callback, Trainer  # noqa: E402

VARIANT_OF = {"adagrad": "adagrad", "rowwise_adagrad": "rowwise_own"}  # what Cardinal's optimizer computes


def recipe(args, extra=()):
    return load("criteo_synthetic", [f"data.synthetic.rows={args.rows}", f'model.name="{args.model}"',
                                     'train.baseline="none"', *extra, *args.set])


class Compare(Callback):
    def __init__(self, plain: PlainLoop, width: int):
        self.plain, self.batches, self.width = plain, iter(plain.train_data), width
        self.seen: set[int] = set()
        self.energy = np.zeros(width)

    def on_step(self, trainer, step: int, loss: float) -> None:
        trainer.embedding.flush()  # every push of this step applied
        out = self.plain.step(next(self.batches))
        ids, r = out["ids"], out["rows"]
        mine = _exported(trainer, ids)
        w, s = mine[:, :self.width], mine[:, self.width:]
        plain_s = self.plain.state_words(r)
        new = np.array([i not in self.seen for i in ids.tolist()])
        self.seen.update(ids.tolist())
        lr = self.plain.lr / (np.sqrt(s) + self.plain.eps)  # row-wise: the values' rate, then a weight's own
        self.energy += (out["grads"] ** 2).sum(0)
        rel = np.abs(s - plain_s) / np.maximum(np.abs(plain_s), 1e-30)
        print(f"{step:4d} {loss:9.6f} {out['loss']:9.6f} {len(ids):6d} {int(new.sum()):6d} "
              f"{np.abs(w - self.plain.values[r]).max():9.2e} {rel.max():9.2e} "
              f"{_median(lr[new, 0]):8.3g} {_spread(lr[~new, 0])} {_spread(lr[~new, -1])}", flush=True)


def _median(x: np.ndarray) -> float:
    return float(np.median(x)) if len(x) else float("nan")


def _spread(x: np.ndarray) -> str:
    return f"{_median(x):8.3g} {x.min() if len(x) else float('nan'):8.3g}"


def _exported(trainer, ids: np.ndarray) -> np.ndarray:
    """Cardinal's rows (values, then state) of ``ids``, read from every embedded shard."""
    parts = [s.tables["emb"].export() for s in trainer.client.transport.stores]
    all_ids = np.concatenate([p["ids"] for p in parts])
    data = np.concatenate([p["data"] for p in parts])
    order = np.argsort(all_ids)
    at = order[np.searchsorted(all_ids, ids, sorter=order)]
    assert (all_ids[at] == ids).all()
    return data[at]


def trace(args) -> None:
    r = recipe(args, ['consistency.mode="sync"', f"train.steps={args.steps}", "eval.every=0",
                      f'sparse_optimizer.name="{args.optimizer}"', "sparse_optimizer.lr=0.03",
                      "sparse_optimizer.initial_accumulator=1e-6"])  # the recipe's (as rowwise.py)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(r, Path(tmp) / "run", progress=False)
        plain = PlainLoop(r, args.variant or VARIANT_OF[args.optimizer], trainer.model.state_dict())
        watch = Compare(plain, plain.width)
        trainer.callbacks.append(watch)
        print(f"{args.model}, {args.optimizer} (Cardinal) against {plain.variant} (plain loop), lr {plain.lr:g}, "
              f"initial_accumulator {plain.acc0:g}")
        print("step   loss(C)  loss(plain)  rows    new  max|dw|  max rel ds  lr(new)  lr(seen): median, min"
              "  of the last column")
        trainer.fit()
        trainer.close()
    share = watch.energy / watch.energy.sum()
    print("share of the gradient energy (sum of g^2 over the traced steps) in each column:",
          " ".join(f"{x:.3f}" for x in share))


def auc(args) -> None:
    for variant in args.variant.split(","):
        for lr in args.lrs.split(","):
            plain = PlainLoop(recipe(args, [f"sparse_optimizer.lr={lr}"]), variant)
            plain.train()
            m = plain.evaluate()
            print(f"{args.model} {variant:14s} lr {lr:6s} AUC {m['auc']:.4f} logloss {m['logloss']:.4f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="deepfm")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--optimizer", default="rowwise_adagrad", choices=sorted(VARIANT_OF))
    p.add_argument("--variant", default="", help="the plain loop's optimizer (plain_loop.VARIANTS)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--auc", action="store_true", help="the plain loop alone, one epoch a variant and lr")
    p.add_argument("--lrs", default="0.003,0.01,0.03,0.1,0.3")
    p.add_argument("--set", action="append", default=[], help="a recipe override, KEY=VALUE")
    args = p.parse_args()
    if args.auc:
        args.variant = args.variant or ",".join(VARIANTS)
        auc(args)
    else:
        trace(args)


if __name__ == "__main__":
    main()
