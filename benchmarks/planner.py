"""The planner's plan against the hash plan: each server's load, and training speed with
`cardinal launch`, on a mix of tables.

    python benchmarks/planner.py [--servers 4] [--steps 300] [--repeats 3] [--rows 600000]

The scenario (generated data, Zipf skew 1.1): 26 fields, whose vocabularies run from 10 to
1M ids (a few are small), one table a field but the hot one, C5, which the 7 fields C5, C10,
C12, C15, C17, C23 and C1 share (about 10x the ids a step of the median table), and C7, the
largest of the rest, a wide table of dim 128 (the others 16). DeepFM, batch 1024, one worker.

Load, per server (busiest over the mean, the hash plan beside the planner's):
  - predicted: the planner's cost model on its sample's statistics (``planner/propose.py``);
  - measured: bytes from each server's rows in the run's last checkpoint (rows x their
    stored width), ids a step from routing 100 batches of the data by the plan's own router,
    requests a step from the pieces with ids.
Speed: samples/s of each plan's run, alternating, the same recipe and settings for both.

Writes results/planner.{md,json}.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

HOT = ["C10", "C12", "C15", "C17", "C23", "C1"]  # read C5's table: C5 the hot one
WIDE = "C7"


def scenario(rows: int, tmp: Path) -> list[str]:
    return [f"data.synthetic.rows={rows}", "data.synthetic.skew=1.1", "embedding.shared=false",
            f"embedding.dims={{{WIDE}=128}}", "embedding.field_tables={" + ",".join(f'{f}="C5"' for f in HOT) + "}",
            'train.baseline="none"', "checkpoint.minutes=0", "eval.every=0", f'train.run_dir="{tmp}"']


def launch(sets: list[str], servers: int, workers: int = 1) -> Path:
    cmd = [sys.executable, "-m", "cardinal.cli", "launch", "--servers", str(servers), "--workers", str(workers), "--",
           *sum((["--set", s] for s in sets), [])]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = re.search(r"run directory (\S+)", proc.stdout)
    if proc.returncode != 0 or found is None:
        raise SystemExit(proc.stdout[-3000:])
    return Path(found.group(1))


def measured(recipe, plan, run_dir: Path, batches: int = 100) -> dict[str, np.ndarray]:
    """Per server: bytes of its rows in the run's last checkpoint, ids and requests a step."""
    from cardinal.checkpoint import layout
    from cardinal.checkpoint.reader import Reader
    from cardinal.planner.stats import _batch_ids, _widths
    from cardinal.train import tables
    from cardinal.train.readers import make_readers

    inputs = tables.plan_inputs(recipe)
    n, words = plan.n_shards, _widths(inputs)
    info = Reader(layout.latest(run_dir / "checkpoints")).info
    out = {k: np.zeros(n) for k in ("bytes", "ids", "requests")}
    for m in info["manifests"].values():
        for name, t in m["tables"].items():
            table = info["plan"].locate(name)[0]
            width, stored = words[table]
            out["bytes"][m["shard"]] += t["rows"] * (4 * stored * t["dim"] // width + 32)
    train, _, _ = make_readers(recipe.data, progress=False)
    for k, batch in enumerate(train):
        if k == batches:
            break
        for table, ids in _batch_ids(inputs, batch).items():
            ids = np.unique(ids)
            for p in plan.pieces(table):
                shards = plan.route(p.name(table), ids)
                out["ids"] += np.bincount(shards, minlength=n) / batches
                out["requests"] += 2 * (np.bincount(shards, minlength=n) > 0) / batches
    return out


def main() -> None:
    from cardinal import planner
    from cardinal.planner.propose import balance, describe, loads, propose
    from cardinal.planner.stats import from_sample
    from cardinal.recipe import load
    from cardinal.sharding.plan import ShardingPlan
    from cardinal.train import tables

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=int, default=4)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rows", type=int, default=600_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="cardinal-planner-") as tmp:
        sets = scenario(args.rows, Path(tmp))
        recipe = load("criteo_synthetic", sets)
        stats = from_sample(tables.plan_inputs(recipe))
        plans = {"hash": ShardingPlan(args.servers), "planner": propose(stats, args.servers)}
        planner.write(plans["planner"], Path(tmp) / "plan.json")
        files = {"hash": "hash", "planner": str(Path(tmp) / "plan.json")}
        hot = next(s for s in stats if s.name == "C5").ids_per_step
        others = float(np.median([s.ids_per_step for s in stats if s.name != "C5"]))
        print(f"hot table C5: {hot:,.0f} ids a step, {hot / others:.1f}x the median table's {others:,.0f}", flush=True)
        rates = {k: [] for k in plans}
        runs = {}
        launch([*sets, "train.steps=20"], args.servers)  # warm: the data, numba's cache
        for r in range(args.repeats):
            for name in (("hash", "planner") if r % 2 == 0 else ("planner", "hash")):
                run = launch([*sets, f"train.steps={args.steps}", f'plan.layout="{files[name]}"'], args.servers)
                rates[name].append(json.loads((run / "summary.json").read_text())["samples_per_s"])
                runs[name] = run
                print(name, f"{rates[name][-1]:,.0f} samples/s", flush=True)
        rows = []
        for name, plan in plans.items():
            want, got = loads(plan, stats), measured(recipe, plan, runs[name])
            rows.append({"plan": name, "samples/s (median)": float(np.median(rates[name])),
                         "bytes max/mean": balance(got["bytes"]), "ids max/mean": balance(got["ids"]),
                         "requests a step": float(got["requests"].sum()),
                         "requests max/mean": balance(got["requests"]),
                         "predicted max/mean (bytes, ids, requests)": ", ".join(
                             f"{balance(want[k]):.3f}" for k in ("bytes", "ids", "requests")),
                         "runs": ", ".join(f"{x:,.0f}" for x in rates[name])})
        speedup = rows[1]["samples/s (median)"] / rows[0]["samples/s (median)"]
        layout = describe(plans["planner"], stats)
    write("planner", "Sharding plans: the planner's against hash-only, 26 fields, a hot and a wide table",
          rows, [f"planner / hash samples/s: {speedup:.2f}x",
                 f"hot table C5 (fields C5, {', '.join(HOT)}): {hot / others:.1f}x the ids a step of the median table; "
                 f"{WIDE}: dim 128, the rest 16",
                 f"cardinal launch --servers {args.servers} --workers 1, {args.steps} steps, DeepFM, batch 1024, "
                 f"{args.rows:,} generated rows (skew 1.1); runs alternate",
                 "bytes: each server's rows in the last checkpoint x their stored width; ids and requests a step: "
                 "100 batches routed by the plan",
                 "the planner's plan: " + "; ".join(layout),
                 f"reproduce: python benchmarks/planner.py --servers {args.servers} --steps {args.steps} "
                 f"--repeats {args.repeats} --rows {args.rows}"])


if __name__ == "__main__":
    main()
