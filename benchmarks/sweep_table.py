"""One markdown table from several ``cardinal sweep`` directories, best final eval AUC first.

    python benchmarks/sweep_table.py runs/sweep-*/ > table.md

Each row is one setting: the values its sweep fixed with --set (less data.cache_dir and
train.threads, which change no number) and its grid values; the final eval AUC; for runs of
more than one epoch the best eval AUC of the first epoch (from metrics.jsonl), which shows
what a second pass over the same rows costs.
"""

import json
import sys
from pathlib import Path

QUIET = ("data.cache_dir=", "data.train=", "train.threads=")  # where the data is; no number changes


def rows_of(sweep_dir: Path) -> list[dict]:
    table = json.loads((sweep_dir / "sweep.json").read_text())
    fixed = [b for b in table["base"] if not b.startswith(QUIET)]
    out = []
    for r in table["rows"]:
        grid = [f"{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in r["setting"].items()]
        run = sweep_dir / Path(r["run_dir"]).name
        out.append({**r, "label": " ".join([*fixed, *grid]), "epoch1": _epoch1_best(run)})
    return out


def _epoch1_best(run: Path) -> float | None:
    path = run / "metrics.jsonl"
    if not path.exists():
        return None
    records = [json.loads(line) for line in path.read_text().splitlines() if line]
    evals = [r for r in records if "eval_auc" in r]
    train = [r for r in records if "epoch" in r]
    if not train or max(r["epoch"] for r in train) == 0:
        return None  # one epoch: the final AUC says it all
    last_of_first = max(r["step"] for r in train if r["epoch"] == 0)
    first = [r["eval_auc"] for r in evals if r["step"] <= last_of_first]
    return max(first) if first else None


def main(dirs: list[str]) -> None:
    rows = [r for d in dirs for r in rows_of(Path(d))]
    rows.sort(key=lambda r: -r["eval_auc"] if r.get("eval_auc") is not None else float("inf"))
    print("| setting (on top of the shipped recipe) | eval AUC | best AUC in epoch 1 | logloss | samples/s | steps |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['label']} | failed: {r['error']} | | | | |")
            continue
        e1 = f"{r['epoch1']:.4f}" if r["epoch1"] is not None else ""
        print(f"| {r['label'] or '(as shipped)'} | {r['eval_auc']:.4f} | {e1} | {r['eval_logloss']:.4f} | "
              f"{r['samples_per_s']:,.0f} | {r['steps']} |")


if __name__ == "__main__":
    main(sys.argv[1:])
