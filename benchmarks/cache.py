"""The worker cache of hot rows: bytes on the wire and AUC, with and without it.

    python benchmarks/cache.py [--workers 2] [--staleness 1,2,4] [--hold 0] [--share 0.1] [--rows N] [--steps N]
                               [--quick]

``cardinal launch --servers 1 --workers W`` runs of the default recipe, sync consistency:
  - no cache (the reference);
  - a cache per worker holding ``--share`` of the rows the reference run created (counted in
    its last checkpoint), staleness s = each of ``--staleness``, holding min(``--hold``, s)
    gradients of a row. Each run's largest logged loss (every 10 steps, worker 0) shows a spike.
Bytes are the gRPC messages both ways (requests + replies, every worker: summary.json's
bytes_sent + bytes_received), so they include what the cache adds (update logs in push
replies, counts) and what it saves. Writes results/cache.{md,json} (cache_quick.* with --quick).
Target (issue 11): >= 80% fewer bytes, AUC within 0.002 of the run without the cache.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import jobs  # noqa: E402
from report import write  # noqa: E402

from cardinal.checkpoint.reader import Reader  # noqa: E402
from cardinal.optim import make_optimizer  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.worker.sources.cache_slots import slot_bytes  # noqa: E402

RECIPE = "criteo_synthetic"
QUICK = {"rows": 40_000, "eval_rows": 10_000, "steps": 40, "batch": 1024}
TIMEOUT_S = 3 * 3600.0


def rows_created(summary: dict) -> int:
    """Rows on the servers at the run's last checkpoint (every table, every shard)."""
    info = Reader(Path(summary["checkpoint"])).info
    return sum(t["rows"] for m in info["manifests"].values() for t in m["tables"].values())


def largest_loss(summary: dict) -> float:
    """The largest training loss the run logged (its metrics.jsonl, beside its checkpoints)."""
    log = Path(summary["checkpoint"]).parents[1] / "metrics.jsonl"
    return max(json.loads(line).get("loss", 0.0) for line in log.read_text().splitlines())


def cache_bytes(recipe, rows: int, share: float) -> int:
    """cache.bytes holding ``share`` of ``rows`` DeepFM rows (dim values + a wide weight), each
    slot with its pending sum, its optimizer state and the cache's bookkeeping."""
    dim = recipe.embedding.dim + 1
    return int(share * rows * slot_bytes(dim, make_optimizer(recipe.sparse_optimizer).state_width(dim)))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--staleness", default="1,2,4", help="s, or several comma-separated (one cached run each)")
    p.add_argument("--hold", type=int, default=0, help="cache.hold: gradients of a row summed before a push (<= s)")
    p.add_argument("--share", type=float, default=0.1, help="the cache's size, a share of the rows created")
    p.add_argument("--policy", default="lru")
    p.add_argument("--rows", type=int, default=0, help="generated training rows (0: the recipe's)")
    p.add_argument("--steps", type=int, default=0, help="train.steps (0: one epoch)")
    p.add_argument("--quick", action="store_true", help=f"a small version: {QUICK}")
    args = p.parse_args(argv)
    sets = ['consistency.mode="sync"', "eval.every=0", 'train.baseline="none"', "metrics.log_every=10"]
    rows, steps = args.rows or (QUICK["rows"] if args.quick else 0), args.steps or (QUICK["steps"] if args.quick else 0)
    sets += [f"data.synthetic.rows={rows}"] if rows else []
    if args.quick:
        sets += [f"data.synthetic.eval_rows={QUICK['eval_rows']}", f"data.batch_size={QUICK['batch']}"]
    sets += [f"train.steps={steps}"] if steps else []
    recipe = load(RECIPE, sets)
    with tempfile.TemporaryDirectory(prefix="cardinal-cache-") as tmp:
        plain = jobs.launch(1, args.workers, sets, Path(tmp) / "plain", TIMEOUT_S)
        if plain.summary is None:
            raise SystemExit(f"the run without cache failed (exit {plain.code}):\n{plain.tail()}")
        n_rows = rows_created(plain.summary)
        capacity = cache_bytes(recipe, n_rows, args.share)
        cache_sets = [f"cache.bytes={capacity}", f'cache.policy="{args.policy}"']
        runs = [("no cache", plain.summary)]
        losses = {"no cache": largest_loss(plain.summary)}
        for s in map(int, args.staleness.split(",")):
            hold = min(args.hold, s)
            name = f"cache {args.share:.0%} of rows, s={s}" + (f", hold {hold}" if hold else "")
            cached = jobs.launch(1, args.workers, [*sets, *cache_sets, f"cache.staleness={s}", f"cache.hold={hold}"],
                                 Path(tmp) / f"s{s}", TIMEOUT_S)
            if cached.summary is None:
                raise SystemExit(f"the run with the cache (s={s}) failed (exit {cached.code}):\n{cached.tail()}")
            runs.append((name, cached.summary))
            losses[name] = largest_loss(cached.summary)
    a = plain.summary
    wire = lambda s: s["bytes_sent"] + s["bytes_received"]
    rows = lambda s: s["pull_bytes_per_sample"] + s["push_bytes_per_sample"]  # rows and gradients only
    table = []
    for name, s in runs:
        table.append({"run": name, "bytes/sample": wire(s) / s["samples"], "bytes vs no cache": wire(s) / wire(a),
                      "embedding bytes vs no cache": rows(s) / rows(a),
                      "eval_auc": s["eval_auc"], "AUC - no cache": s["eval_auc"] - a["eval_auc"],
                      "largest loss": losses[name],
                      "hit rate (unique)": s.get("cache_emb_hit_rate_unique", "-"),
                      "hit rate (accesses)": s.get("cache_emb_hit_rate_accesses", "-"),
                      "staleness p50/p99": f"{s['cache_staleness_p50']:g}/{s['cache_staleness_p99']:g}"
                      if "cache_staleness_p50" in s else "-",
                      "evictions": s.get("cache_emb_evictions", "-"), "samples/s": s["samples_per_s"]})
    notes = [f"{args.workers} workers, 1 server, sync; {a['steps']} steps of {a['samples'] // max(1, a['steps'])} "
             f"samples; {n_rows:,} rows created; cache {capacity:,} bytes per worker ({args.policy})",
             "bytes: every gRPC message both ways (pulls, pushes, their replies with the update logs, clock polls)",
             "embedding bytes: rows pulled and gradients pushed (at their codec's size), per sample",
             "largest loss: the largest training loss worker 0 logged (every 10 steps): a spike shows there",
             f"hold: gradients of a row summed before a push (cache.hold, --hold {args.hold}, at most s)",
             "target: >= 80% fewer embedding bytes (<= 0.2 of no cache), AUC within 0.002, no loss spike"]
    write("cache" + ("_quick" if args.quick else ""), f"Worker cache of hot rows ({RECIPE}, {args.workers} workers)",
          table, notes, extra={"sets": sets, "cache_sets": cache_sets, "summaries": [s for _, s in runs]})


if __name__ == "__main__":
    main()
