"""Admission sweep: rows kept, bytes and AUC per threshold, on generated Zipf data and MovieLens.

    python benchmarks/admission.py [--rows 1000000] [--thresholds 1,2,3,4,6,8,10]

Each threshold trains the shipped recipe once (criteo_synthetic with --rows generated rows;
movielens on ml-latest-small) with `ps.memory.admission.policy = "count"` (threshold 1 admits every id:
the same run as no filter) and reports the model table's rows and the servers' bytes at the end
of the run, eval AUC and logloss. The lr baseline is off (train.baseline = "none"): its table
would follow the same filter and double the rows counted.
"""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from movielens import data_dir  # noqa: E402
from report import write  # noqa: E402

from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402


def run(recipe: str, sets: list[str], threshold: int) -> dict:
    r = load(recipe, [*sets, 'train.baseline="none"', 'ps.memory.admission.policy="count"',
                      f"ps.memory.admission.threshold={threshold}"])
    with tempfile.TemporaryDirectory() as tmp:
        s = Trainer(r, Path(tmp) / "run", progress=False).fit()
    return {"rows": s["ps_rows"], "bytes": s["ps_bytes"], "refused": s["ps_emb_refused"], "auc": s["eval_auc"],
            "logloss": s["eval_logloss"], "samples/s": s["samples_per_s"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="generated training rows")
    parser.add_argument("--thresholds", default="1,2,3,4,6,8,10")
    args = parser.parse_args()
    thresholds = [int(t) for t in args.thresholds.split(",")]
    sets = {"zipf (criteo_synthetic)": ("criteo_synthetic", [f"data.synthetic.rows={args.rows}"]),
            "movielens": ("movielens", [f'data.train=["{data_dir()}"]'])}
    rows = []
    for name, (recipe, extra) in sets.items():
        base = None
        for t in thresholds:
            r = run(recipe, extra, t)
            base = base or r
            rows.append({"data": name, "threshold": t, "rows": r["rows"], "rows vs 1": r["rows"] / base["rows"],
                         "MB": r["bytes"] / 1e6, "refused sightings": r["refused"],
                         "eval AUC": f"{r['auc']:.4f}", "AUC - at 1": f"{r['auc'] - base['auc']:+.4f}",
                         "eval logloss": r["logloss"], "samples/s": r["samples/s"]})
            print(rows[-1], flush=True)
    write("admission", "Admission by exact count: rows kept and AUC per threshold", rows,
          ["count filter: an id gets a row on its threshold-th sighting (one sighting = one batch that holds it);"
           " until then it reads zeros and its gradients are dropped",
           "rows: the model table's rows at the end of the run, all shards; MB: every table's bytes (rows, hash "
           "index, the filter's counters)",
           f"zipf: the default recipe on {args.rows:,} generated rows (skew 1.1, 26 fields); movielens: the "
           "shipped recipe, time split",
           f"reproduce: python benchmarks/admission.py --rows {args.rows} --thresholds {args.thresholds}"])


if __name__ == "__main__":
    main()
