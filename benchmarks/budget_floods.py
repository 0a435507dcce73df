"""ps.memory.budget under the audit's floods of new ids (issue 25): the bytes a server accounts.

    python benchmarks/budget_floods.py [--ids 8000000] [--budget-mib 64] [--base DIR]

One server's store (one table as the default recipe's: dim 16, Adagrad; LRU eviction), ps.memory.budget =
--budget-mib, takes --ids ids never seen before, all at one step, in training pulls of 100,000
(as a worker, or an attacker, sends them): with no admission filter, with the `count` filter and
with the `bloom` filter (threshold 2, the default 4 MiB of counters). After every pull it reads
the accounted bytes (``stats()["bytes"]``: rows, hash index, filter state); the peak over the
flood is compared with the budget. A pull the budget has no room for is refused (StoreFull, over
gRPC RESOURCE_EXHAUSTED) and counted. Each flood runs in a process of its own (its RSS growth is
shown for context: item 5 of the issue is the process's bound). ``--base DIR`` runs the same
floods on another checkout (``git archive <commit> | tar -x -C DIR``): the code before the bound.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
PULL = 100_000
FLOODS = {"none": {}, "count": {"policy": "count", "threshold": 2}, "bloom": {"policy": "bloom", "threshold": 2}}


def rss() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * 4096


def one(flood: str, n_ids: int, budget: int) -> dict:
    """The flood, in this process: its figures as a dict."""
    import numpy as np

    from cardinal.embedding import TableConfig
    from cardinal.ps import ShardStore, StoreConfig, StoreFull, StoreLimits
    from cardinal.recipe.admission import AdmissionConfig
    from cardinal.recipe.eviction import EvictionConfig

    admission = {"emb": AdmissionConfig(**FLOODS[flood])} if FLOODS[flood] else {}
    store = ShardStore(StoreConfig((TableConfig("emb", 16),), {"name": "adagrad"}, admission,
                       EvictionConfig(policy="lru")), limits=StoreLimits(memory_budget=budget))
    rng = np.random.default_rng(0)
    base, peak, refused, start = rss(), 0, 0, time.perf_counter()
    for _ in range(0, n_ids, PULL):
        ids = rng.integers(1, 2**63 - 1, PULL, dtype=np.int64)
        try:
            store.pull("emb", ids, step=1)
        except StoreFull:
            refused += 1
        peak = max(peak, store.stats()["bytes"])
    stats = store.stats()["tables"]["emb"]
    return {"flood": flood, "peak MiB": peak / MIB, "peak / budget": peak / budget, "rows": stats["rows"],
            "filter MiB": stats["admission_bytes"] / MIB, "pulls refused": refused,
            "RSS growth MiB": (rss() - base) / MIB, "s": time.perf_counter() - start}


def run(code: Path, flood: str, n_ids: int, budget: int) -> dict:
    """``one`` in a process of its own, on the checkout ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code / "src")}
    out = subprocess.run([sys.executable, __file__, "--one", flood, "--ids", str(n_ids), "--budget-mib",
                          str(budget // MIB)], env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"flood {flood} on {code} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=8_000_000)
    parser.add_argument("--budget-mib", type=int, default=64)
    parser.add_argument("--base", type=Path, help="another checkout: the code before the bound")
    parser.add_argument("--one", choices=sorted(FLOODS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    budget = args.budget_mib * MIB
    if args.one:
        print(json.dumps(one(args.one, args.ids, budget)))
        return
    from report import write

    rows = []
    for name, code in [("before (base checkout)", args.base)] * bool(args.base) + [("this checkout", ROOT)]:
        for flood in FLOODS:
            rows.append({"code": name, **run(code, flood, args.ids, budget)})
            print(rows[-1], flush=True)
    write("budget_floods", f"{args.ids:,} new ids at one step against ps.memory.budget = {args.budget_mib} MiB", rows,
          [f"one store, one table (dim 16, Adagrad: the default recipe's; LRU), {args.ids:,} ids never seen before, "
           f"all at step 1, in pulls of {PULL:,}; admission threshold 2 (count, bloom: the default 4 MiB of counters)",
           "peak: the most bytes the store accounted (rows, hash index, filter state) after any pull; pulls refused: "
           "StoreFull (RESOURCE_EXHAUSTED over gRPC), each changing nothing",
           "RSS growth: the process's, for context (the process bound is issue 25 item 5)",
           "reproduce: python benchmarks/budget_floods.py --ids {} --budget-mib {}{}".format(
               args.ids, args.budget_mib, " --base DIR (git archive 45c27de | tar -x -C DIR)" if args.base else "")])


if __name__ == "__main__":
    main()
