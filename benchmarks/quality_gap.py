"""Where a trained model on generated data loses AUC against what the data allows.

    python benchmarks/quality_gap.py RUN_DIR [RUN_DIR ...] [--newest] [--name NAME]  # results/NAME{,_drop}.md

A run of the default recipe (3M generated rows) reaches about 0.808 where the teacher_bound.py
ceiling is 0.824. A single figure cannot say which part of the model the 0.016 is in, so this
replays the generator (``teacher_bound.replay``: each eval id's training count and the teacher's
own terms) and scores each run's best checkpoint (``--newest``: its last) on the eval split:

- by bucket: eval rows grouped by how often their rarest id was seen in training, the learner's
  AUC and logloss beside the teacher's, the teacher's without ids it never saw (k = 1) and the
  ceiling (every weight estimated as well as its count allows). A gap that grows towards the
  rare buckets points at rare rows; one that is even points at frequent ids or the dense part.
- ablation: the learner with every id seen fewer than k times dropped from its input (read as
  an unknown id: zeros). If AUC rises, the rows of rare ids hurt (they memorised their few
  examples); if it falls, they carry signal.
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torchmetrics.functional.classification import binary_auroc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write  # noqa: E402
from teacher_bound import estimated, logit, replay  # noqa: E402

from cardinal.checkpoint.layout import latest  # noqa: E402
from cardinal.data.batch import Bag  # noqa: E402
from cardinal.data.criteo import SPARSE, CriteoReader  # noqa: E402
from cardinal.serve.export import export_run, run_recipe  # noqa: E402
from cardinal.serve.model import ServingModel  # noqa: E402
from cardinal.train.readers import synthetic_dir  # noqa: E402

BUCKETS = [(0, 1), (1, 5), (5, 30), (30, 100), (100, 1000), (1000, None)]
DROPS = (1, 2, 5, 10, 30, 100)


def auc(score: np.ndarray, y: np.ndarray) -> str:
    """As the tables print it: four decimals (report.fmt's three cannot show a 0.002 gap)."""
    return f"{float(binary_auroc(torch.from_numpy(np.asarray(score, np.float64)), torch.from_numpy(y))):.4f}"


def logloss(p: np.ndarray, y: np.ndarray) -> str:
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return f"{float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean()):.4f}"


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def drop_rare(sparse: dict, seen: np.ndarray, k: int) -> dict:
    """The batch's single-hot bags without the ids seen fewer than ``k`` times (``seen``: its rows)."""
    out = {}
    for f, name in enumerate(SPARSE):
        bag = sparse[name]
        has = np.diff(bag.offsets) > 0
        keep = has & (seen[:, f] >= k)
        offsets = np.zeros(len(has) + 1, np.int64)
        np.cumsum(keep, out=offsets[1:])
        out[name] = Bag(np.ascontiguousarray(bag.values[keep[has]]), offsets)
    return out


def predictions(run_dir: Path, eval_file: Path, seen: np.ndarray, newest: bool) -> dict:
    """{k: (eval rows,) probabilities}: 0 the model as trained, k the model with ids seen < k dropped."""
    with tempfile.TemporaryDirectory() as tmp:
        export_run(run_dir, Path(tmp) / "export", latest(run_dir / "checkpoints") if newest else None)
        model = ServingModel.load(Path(tmp) / "export", threads=2)
        out = {k: [] for k in (0, *DROPS)}
        at = 0
        for batch in CriteoReader([eval_file], 8192):
            rows = seen[at:at + len(batch)]
            at += len(batch)
            out[0].append(model.predict(batch))
            for k in DROPS:
                batch.sparse = drop_rare(batch.sparse, rows, k)  # dropping more keeps dropping less
                out[k].append(model.predict(batch))
    assert at == len(seen), (at, len(seen))
    return {k: np.concatenate(v).astype(np.float64) for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--newest", action="store_true", help="each run's newest checkpoint, not its best")
    ap.add_argument("--name", default="quality_gap")
    args = ap.parse_args()
    data = run_recipe(args.runs[0]).data
    n_rows, n_eval = data.synthetic.rows, data.synthetic.eval_rows
    _, (ranks, cat_ok, first, latent, dense), y, seen = replay(n_rows, n_eval)
    z_teacher = logit(first, latent, dense, np.ones_like(seen, bool))
    z_seen = logit(first, latent, dense, seen >= 1)
    f_hat, l_hat = estimated(ranks, seen, first, latent)
    z_bound = logit(f_hat, l_hat, dense, np.ones_like(seen, bool))
    rarest = np.where(cat_ok, seen, np.iinfo(np.int64).max).min(1)
    learners = {str(r): predictions(r, synthetic_dir(data) / "eval.tsv", seen, args.newest) for r in args.runs}

    rare = ((seen < 30) & cat_ok).sum(1)
    groups = [("all rows", np.ones_like(y, bool))]
    for lo, hi in BUCKETS:
        groups.append((f"rarest id seen {lo}-{hi - 1}" if hi else f"rarest id seen >= {lo}",
                       (rarest >= lo) & (rarest < hi if hi else True)))
    for lo, hi in ((0, 1), (1, 3), (3, 5), (5, None)):
        groups.append((f"{lo}-{hi - 1} ids seen < 30" if hi else f">= {lo} ids seen < 30",
                       (rare >= lo) & (rare < hi if hi else True)))
    rows = []
    for label, m in groups:
        if len(np.unique(y[m])) < 2:
            continue
        row = {"eval rows": label, "rows": int(m.sum()), "click rate": float(y[m].mean()),
               "teacher AUC": auc(z_teacher[m], y[m]), "teacher, seen ids AUC": auc(z_seen[m], y[m]),
               "ceiling AUC": auc(z_bound[m], y[m]), "ceiling logloss": logloss(sigmoid(z_bound[m]), y[m])}
        for name, p in learners.items():
            tag = Path(name).name
            row[f"{tag} AUC"] = auc(p[0][m], y[m])
            row[f"{tag} logloss"] = logloss(p[0][m], y[m])
        rows.append(row)
    ablation = []
    for k in (0, *DROPS):
        row = {"ids dropped": "none" if k == 0 else f"seen < {k}",
               "eval id occurrences dropped": float(((seen < k) & cat_ok).sum() / cat_ok.sum()),
               "teacher AUC": auc(logit(first, latent, dense, seen >= k), y)}
        for name, p in learners.items():
            row[f"{Path(name).name} AUC"] = auc(p[k], y)
            row[f"{Path(name).name} logloss"] = logloss(p[k], y)
        ablation.append(row)
    which = "newest" if args.newest else "best"
    header = [f"runs: {', '.join(learners)} (each its {which} checkpoint), {n_rows:,} training rows, "
              f"{n_eval:,} eval rows", f"`python benchmarks/quality_gap.py {' '.join(map(str, args.runs))}"
              f"{' --newest' if args.newest else ''} --name {args.name}`"]
    write(args.name, "Where the learner loses AUC: eval rows by the training count of their rarest id", rows,
          ["teacher: the generator's logit; teacher, seen ids: without the terms of ids unseen in training;",
           "ceiling: every id's weights as well as its training count allows (teacher_bound.py's 0.824)"],
          header=header)
    write(args.name + "_drop", "The learner with the ids seen fewer than k times dropped from its input", ablation,
          ["a dropped id reads zeros, as an id never trained; teacher AUC: the teacher's logit without those ids"],
          header=header)

if __name__ == "__main__":
    main()
