"""Tables past RAM: a quarter of the rows in RAM and the rest on disk against all in RAM, and a
byte budget held while the id set keeps growing.

    python benchmarks/tiers.py [--rows 1000000] [--budget-mib 64] [--steps 300] [--policies lru,lfu]

1. Training: the default recipe on --rows generated rows, once with every row in RAM and then
   with ps.memory.budget at 25% of the first run's bytes and a disk tier (RocksDB) for the rest,
   once per eviction policy in --policies (which rows stay in RAM). Every run must end with
   bitwise the same tables and dense model; samples/s side by side.
2. Budget: one server's store, one table (dim 16, row-wise Adagrad), pulled and pushed for
   --steps steps of 20,000 ids, half of them never seen before, so the id set grows without end;
   ps.memory.budget = --budget-mib. After the first time the store reaches its budget, the
   accounted bytes of every step and the process RSS are compared with the budget: without and
   with a disk tier (which then takes what RAM cannot hold).
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.embedding import TableConfig  # noqa: E402
from cardinal.ps import ShardStore, StoreConfig, StoreLimits  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402


def rss() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * 4096


def train(rows: int, tmp: Path, name: str, *sets: str) -> tuple[dict, Trainer]:
    recipe = load("criteo_synthetic", [f"data.synthetic.rows={rows}", 'consistency.mode="sync"',
                                       'train.baseline="none"', *sets])
    trainer = Trainer(recipe, tmp / name, progress=False)
    return trainer.fit(), trainer


def training(rows: int, policies: list[str]) -> list[dict]:
    """All in RAM, then a quarter of it with the rest on disk under each eviction policy (which rows
    stay in RAM: it moves no bit of the model, only how often rows go to disk and come back)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ram, a = train(rows, tmp, "ram")
        budget = ram["ps_bytes"] // 4
        runs = [("all in RAM", ram, True)]
        for policy in policies:
            tiered, b = train(rows, tmp, f"tiered-{policy}", f"ps.memory.budget={budget}",
                              'ps.memory.disk_budget="64GiB"', f'ps.memory.disk_dir="{tmp / "tiers" / policy}"',
                              f'ps.memory.eviction.policy="{policy}"')
            same = a.client.digest("emb") == b.client.digest("emb") and all(
                torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
            runs.append((f"25% in RAM, rest on disk, {policy}", tiered, same))
            b.close()
        a.close()
    out = []
    for name, s, same in runs:
        out.append({"run": name, "RAM MB": s["ps_bytes"] / 1e6, "disk MB": s["ps_disk_bytes"] / 1e6,
                    "rows on disk": s["ps_disk_rows"], "rows faulted in": s["ps_emb_faulted"],
                    "rows demoted": s["ps_emb_demoted"], "samples/s": s["samples_per_s"],
                    "vs RAM": s["samples_per_s"] / ram["samples_per_s"], "eval AUC": f"{s['eval_auc']:.4f}",
                    "bitwise = RAM": "yes" if same else "NO"})
    return out


def budget_run(budget: int, steps: int, disk: bool) -> dict:
    budget_steps(max(budget >> 6, 16 << 20), 20, disk)  # compile every kernel first: numba's memory is not
    # the store's (16 MiB at least: two steps of rows, protected from eviction, fit; 20 steps pass it)
    return budget_steps(budget, steps, disk)


def budget_steps(budget: int, steps: int, disk: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        limits = StoreLimits(memory_budget=budget, disk_budget=(64 << 30) if disk else 0)
        store = ShardStore(StoreConfig((TableConfig("t", 16),), {"name": "rowwise_adagrad"}), limits=limits,
                           tier_dir=tmp)
        rng = np.random.default_rng(0)
        base, fractions, peak_rss, start, reached = rss(), [], 0, time.perf_counter(), False
        for step in range(1, steps + 1):
            ids = np.concatenate([rng.zipf(1.1, 10_000), rng.integers(2**40, 2**62, 10_000)]).astype(np.int64)
            rows = store.pull("t", ids, step=step)
            store.push("t", ids, np.full_like(rows, 0.01), step=step)
            st = store.stats()
            reached = reached or st["bytes"] >= 0.98 * budget
            if reached and not fractions:
                base = rss() - st["bytes"]  # what the process held beside the store when it reached its budget
            if reached:
                fractions.append(st["bytes"] / budget)
                peak_rss = max(peak_rss, rss() - base)
        st = store.stats()["tables"]["t"]
        store.close()
    return {"disk tier": "yes" if disk else "no", "budget MiB": budget / 2**20, "steps at budget": len(fractions),
            "min bytes / budget": min(fractions), "max bytes / budget": max(fractions),
            "peak RSS growth / budget": peak_rss / budget, "rows in RAM": st["ram_rows"], "rows on disk": st["disk_rows"],
            "rows evicted": sum(st["evicted"].values()), "s": time.perf_counter() - start}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="generated training rows (part 1)")
    parser.add_argument("--budget-mib", type=int, default=64, help="the store's budget (part 2)")
    parser.add_argument("--steps", type=int, default=300, help="steps of the growing id set (part 2)")
    parser.add_argument("--policies", default="lru,lfu", help="eviction policies of the tiered runs (part 1)")
    args = parser.parse_args()
    reproduce = f"reproduce: python benchmarks/tiers.py --rows {args.rows} --budget-mib {args.budget_mib} " \
                f"--steps {args.steps} --policies {args.policies}"
    held = [budget_run(args.budget_mib << 20, args.steps, disk) for disk in (False, True)]
    write("tiers_budget", "A byte budget held while the id set grows", held,
          ["one table, dim 16, row-wise Adagrad; each step pulls and pushes 20,000 ids: 10,000 Zipf(1.1), 10,000 "
           "never seen before", "bytes: what the store accounts (rows, hash index) after every step, from the "
           "first step at 98% of the budget on; RSS growth: the process's resident memory from then on, past what it "
           "held beside the store at that moment, against the budget (numpy's temporaries, RocksDB's memtable and "
           "cache count too)",
           "an eviction frees down to 99% of the budget (ps/server/memory.py LOW_WATER)", reproduce])
    write("tiers", "25% of the rows in RAM, the rest on disk, against all in RAM",
          training(args.rows, args.policies.split(",")),
          [f"the default recipe (DeepFM, dim 16) on {args.rows:,} generated rows, one epoch, sync, no lr baseline; "
           "the second run's ps.memory.budget is 25% of the first run's bytes at its end",
           "bitwise = RAM: the model table's digest and every dense weight equal to the all-in-RAM run's",
           "rows faulted in / demoted: rows read back from the disk tier / written out to it, whole run",
           "lru, lfu: ps.memory.eviction.policy, which rows stay in RAM (lru: the recipe's default); the model's "
           "bits do not depend on it", reproduce])


if __name__ == "__main__":
    main()
