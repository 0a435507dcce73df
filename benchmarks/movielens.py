"""AUC and logloss of each model on MovieLens ml-latest-small (the shipped ``movielens`` recipe).

    python benchmarks/movielens.py

Ratings >= 4 are clicks; the latest 20% of ratings (by time) evaluate. Each model trains
the recipe's epochs on the embedded parameter server.
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.train import Trainer, config  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "movielens-latest-small"
MODELS = {"deepfm": [], "wide_deep": ['model.name="wide_deep"', "model.hidden=[64]"],
          "dlrm": ['model.name="dlrm"', "model.bottom=[16]", "model.top=[64]"]}


def main():
    rows = []
    for name, sets in MODELS.items():
        recipe = config.load("movielens", [f'data.train=["{DATA}"]', *sets])
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            s = Trainer(recipe, Path(tmp) / "run", progress=False).fit()
        rows.append({"model": name, "eval AUC": s["eval_auc"], "eval logloss": s["eval_logloss"],
                     "steps": s["steps"], "samples/s": s["samples_per_s"], "wall s": time.perf_counter() - start})
    write("movielens", "MovieLens ml-latest-small: each model, embedded parameter server", rows,
          ["rating >= 4 is a click; user, movie, genres (multi-hot), year; latest 20% of ratings evaluate",
           "recipe: src/cardinal/recipes/movielens.toml (dim 16, Adagrad 0.05 on the servers, Adam 1e-3, 1 epoch)",
           "reproduce: python benchmarks/movielens.py"])


if __name__ == "__main__":
    main()
