"""Copies of hot rows on every server (``sharding/plan.py``, ``Replicas``): each server's load with
several workers, and training speed with `cardinal launch`, against the plans without copies.

    python benchmarks/replicas.py [--servers 4] [--workers 4] [--copies 2000] [--staleness 4]
                                  [--steps 100] [--repeats 1] [--rows 600000]

The scenario is ``planner.py``'s: 26 fields of generated data (skew 1.1), the hot table C5 read
by 7 fields, the wide table C7. Plans, for ``--servers`` servers:
  - hash: every table row-wise over every server;
  - planner: the planner's (C5 spread row-wise over several servers);
  - C5 whole: the planner's, but C5 whole on its first server (one request a step for it);
  - C5 whole + copies: the same, with C5's ``--copies`` hottest ids copied to every server,
    refreshed every ``--staleness`` steps; worker w reads them from server (first + w) % n.

Load: each of ``--workers`` workers takes its own batches (data-parallel), 50 steps of them,
routed by the plan's own router as the client routes them: per server, the ids it reads (pulls,
copies included) and writes (pushes to the rows' own servers, and the refreshes' rows), and the
requests. Speed: samples/s of `cardinal launch --workers W` with each plan, runs alternating.

Writes results/replicas.{md,json}.
"""

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from planner import launch, scenario  # noqa: E402
from report import write  # noqa: E402


def load(recipe, plan, workers: int, steps: int = 50) -> dict:
    """Per server, a step: ids read, ids written, requests; and C5's ids read from copies."""
    from cardinal.planner.stats import _batch_ids
    from cardinal.train import tables
    from cardinal.train.readers import make_readers

    inputs = tables.plan_inputs(recipe)
    n = plan.n_shards
    out = {k: np.zeros(n) for k in ("read", "written", "requests")}
    copied = pulled = 0
    train, _, _ = make_readers(recipe.data, progress=False)
    batches = iter(train)
    for step in range(steps):
        for w in range(workers):
            for table, ids in _batch_ids(inputs, next(batches)).items():
                ids = np.unique(ids)
                shards, from_copies = plan.read_route(table, ids, w)
                out["read"] += np.bincount(shards, minlength=n)
                own = plan.route(table, ids)
                out["written"] += np.bincount(own, minlength=n)
                reads = np.bincount(shards, minlength=n) > 0
                out["requests"] += reads + (np.bincount(own, minlength=n) > 0)
                if table in plan.replicas:
                    pulled += len(ids)
                    copied += 0 if from_copies is None else int(from_copies.sum())
        for table, spec in plan.replicas.items():  # the refresher's pull, then a write to each reader
            if step % spec.staleness == 0:
                own = plan.route(table, spec.array)
                out["read"] += np.bincount(own, minlength=n)
                readers = sorted({plan.reader(table, w) for w in range(workers)})
                for s in readers:
                    if (own != s).any():
                        out["written"][s] += len(spec.ids)
                        out["requests"][s] += 1
                out["requests"] += np.bincount(own, minlength=n) > 0
    return {**{k: v / steps for k, v in out.items()}, "copied share": copied / pulled if pulled else 0.0}


def main() -> None:
    from cardinal import planner
    from cardinal.planner.hot import hot_ids
    from cardinal.planner.propose import balance, propose
    from cardinal.planner.stats import from_sample
    from cardinal.recipe import load as load_recipe
    from cardinal.sharding.plan import Piece, Replicas, ShardingPlan
    from cardinal.train import tables

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=int, default=4)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--copies", type=int, default=2000)
    p.add_argument("--staleness", type=int, default=4)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--rows", type=int, default=600_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="cardinal-replicas-") as tmp:
        sets = scenario(args.rows, Path(tmp))
        recipe = load_recipe("criteo_synthetic", sets)
        inputs = tables.plan_inputs(recipe)
        stats = from_sample(inputs)
        proposed = propose(stats, args.servers)
        home = proposed.pieces("C5")[0].servers[0]
        whole = replace(proposed, tables={**proposed.tables, "C5": (Piece((home,)),)})
        (ids, share), = hot_ids(inputs, {"C5": args.copies}).values()
        copies = replace(whole, replicas={"C5": Replicas(tuple(ids), args.staleness)})
        plans = {"hash": ShardingPlan(args.servers), "planner": proposed, "C5 whole": whole,
                 f"C5 whole + {args.copies} copies": copies}
        files = {}
        for name, plan in plans.items():
            files[name] = Path(tmp) / f"{len(files)}.json"
            planner.write(plan, files[name])
        print(f"C5's {args.copies} hottest ids: {share:.0%} of its pulled ids", flush=True)
        loads = {name: load(recipe, plan, args.workers) for name, plan in plans.items()}
        rates = {k: [] for k in plans}
        stale = {k: [] for k in plans}  # of the ids the workers asked of copies, those past the bound
        if args.repeats:
            launch([*sets, "train.steps=10"], args.servers)  # warm: the data, numba's cache
        for r in range(args.repeats):
            for name in (list(plans) if r % 2 == 0 else list(plans)[::-1]):
                run = launch([*sets, f"train.steps={args.steps}", f'plan.layout="{files[name]}"'], args.servers,
                             args.workers)
                summary = json.loads((run / "summary.json").read_text())
                rates[name].append(summary["samples_per_s"])
                asked = summary.get("copied_ids_per_sample", 0) + summary.get("copied_stale_ids_per_sample", 0)
                if asked:
                    stale[name].append(summary["copied_stale_ids_per_sample"] / asked)
                print(name, f"{rates[name][-1]:,.0f} samples/s", flush=True)
        rows = []
        for name, got in loads.items():
            total = got["read"] + got["written"]
            rows.append({"plan": name, "ids read+written max/mean": balance(total),
                         "reads max/mean": balance(got["read"]), "writes max/mean": balance(got["written"]),
                         "busiest server, ids a step": float(total.max()),
                         "requests a step": float(got["requests"].sum()),
                         "C5 ids from copies": f"{got['copied share']:.0%}" if plans[name].replicas else "",
                         "copy reads past the bound (runs)": ", ".join(f"{x:.1%}" for x in stale[name]),
                         "samples/s": float(np.median(rates[name])) if rates[name] else float("nan"),
                         "runs": ", ".join(f"{x:,.0f}" for x in rates[name])})
    write("replicas", "Copies of hot rows: each server's load with several workers, 26 fields, a hot table",
          rows, [f"{args.servers} servers, {args.workers} workers (each its own batches of 1024), 50 steps routed "
                 "by each plan's router: ids read (pulls, copies) and written (pushes, refreshes) per server",
                 f"C5 (7 fields' table): its {args.copies} hottest ids are {share:.0%} of its pulled ids, "
                 f"refreshed every {args.staleness} steps",
                 f"speed: cardinal launch --servers {args.servers} --workers {args.workers}, {args.steps} steps, "
                 f"DeepFM, {args.rows:,} generated rows (skew 1.1); {args.repeats} run(s) a plan, alternating",
                 f"reproduce: python benchmarks/replicas.py --servers {args.servers} --workers {args.workers} "
                 f"--copies {args.copies} --staleness {args.staleness} --steps {args.steps} "
                 f"--repeats {args.repeats} --rows {args.rows}"])


if __name__ == "__main__":
    main()
