"""AUC and logloss on MovieLens ml-latest-small, time split (the shipped ``movielens`` recipe).

    cardinal data movielens            # once (or the shared copy beside this checkout is used)
    python benchmarks/movielens.py     # 1-3 minutes on 2 cores (each run: seconds on a quiet machine)

Ratings >= 4 are clicks; the latest 20% of ratings (by time) evaluate. Each model trains the
recipe's epoch on the embedded parameter server; DeepFM (the recipe itself) with four seeds.
Two rows train nothing and say how much of the figure the features carry: the history alone
(the user's mean rating so far + the user's mean for the movie's genres + the movie's mean so
far, summed) and the same recipe without the history fields (the reader before them).
"""

import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torchmetrics.functional.classification import binary_auroc

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.data import MovieLensReader  # noqa: E402
from cardinal.data.download import default_dir, is_complete  # noqa: E402
from cardinal.data.movielens_history import FIELDS  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "movielens-latest-small"
MODELS = {"deepfm": [], "deepfwfm": ['model.name="deepfwfm"', "model.hidden=[64]"],
          "wide_deep": ['model.name="wide_deep"', "model.hidden=[64]"],
          "dlrm": ['model.name="dlrm"', "model.bottom=[16]", "model.top=[64]"]}
SEEDS = [0, 1, 2, 3]
# The movielens recipe as it stood before its sweep (results/sweep_movielens.md), for the benchmarks whose
# committed tables were measured on it and that need one table for every field (peers.py: the peer's model has
# user rows, which the swept recipe's user table never admits; compression.py: a shared table to compress)
BEFORE_SWEEP = ["ps.memory.admission.tables={}", "embedding.shared=true", "embedding.field_tables={}",
                "embedding.dim=8", 'embedding.pooling="sum"', "data.batch_size=1024", "sparse_optimizer.lr=0.02",
                "dense_optimizer.lr=0.001"]


def find_copy() -> Path | None:
    """The downloaded copy, else the shared one beside this checkout, else None."""
    return next((d for d in (default_dir("movielens"), SHARED) if is_complete("movielens", d)), None)


def data_dir() -> Path:
    return find_copy() or sys.exit("no MovieLens copy: run `cardinal data movielens` first")


def run(data: Path, sets: list[str]) -> dict:
    recipe = load("movielens", [f'data.train=["{data}"]', *sets])
    with tempfile.TemporaryDirectory() as tmp:
        s = Trainer(recipe, Path(tmp) / "run", progress=False).fit()
    return {"eval AUC": f"{s['eval_auc']:.4f}", "eval logloss": s["eval_logloss"], "steps": s["steps"]}


def history_alone(data: Path) -> float:
    """The AUC of a sum of three history buckets: no training at all."""
    ev = MovieLensReader(data, "eval", 1 << 20)
    score = sum(np.where(ev.history[f] >= 0, ev.history[f], 14) for f in ("user_mean", "user_genre_mean", "movie_mean"))
    # torchmetrics reads scores outside [0, 1] as logits; keep them inside
    return binary_auroc(torch.from_numpy(score / 100.0), torch.from_numpy(ev.labels).int()).item()


def without_history(data: Path) -> dict:
    original = MovieLensReader._history
    MovieLensReader._history = lambda self, *a: {f: np.full(len(self.labels), -1, np.int64) for f in FIELDS}
    try:
        return run(data, [])
    finally:
        MovieLensReader._history = original


def main():
    data = data_dir()
    rows = []
    seeds = [run(data, [f"train.seed={s}"]) for s in SEEDS]
    aucs = [float(r["eval AUC"]) for r in seeds]
    rows.append({"model": "deepfm (the recipe)", "seed": 0, **seeds[0],
                 "AUC over seeds": f"{statistics.mean(aucs):.4f} (min {min(aucs):.4f}, max {max(aucs):.4f})"})
    for name, sets in list(MODELS.items())[1:]:
        rows.append({"model": name, "seed": 0, **run(data, sets), "AUC over seeds": ""})
    rows.append({"model": "deepfm without the history fields", "seed": 0, **without_history(data), "AUC over seeds": ""})
    rows.append({"model": "history alone, no training", "seed": "", "eval AUC": f"{history_alone(data):.4f}", "eval logloss": "",
                 "steps": 0, "AUC over seeds": ""})
    write("movielens", "MovieLens ml-latest-small, time split: each model, embedded parameter server", rows,
          ["rating >= 4 is a click; user, movie, genres, year, and the history known before each rating "
           "(data/movielens_history.py); latest 20% of ratings evaluate",
           "recipe: src/cardinal/recipes/movielens.toml (DeepFM, dim 32, a table a field, no user-id rows, "
           "Adagrad 0.01 on the servers, Adam 2e-3, batch 512, 1 epoch); seeds " + ", ".join(map(str, SEEDS)),
           f"data: {data}", "reproduce: python benchmarks/movielens.py"])


if __name__ == "__main__":
    main()
