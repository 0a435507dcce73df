"""Smaller tables at the same quality: row formats against float32 and the hashing trick.

    python benchmarks/compression.py [--rows 1000000] [--dims 16,64] [--saec 20] [--saec-at 0.5,0.8] [--saec-only]

For each data set (criteo_synthetic with --rows generated rows, Zipf ids; movielens on
ml-latest-small) and each embedding dim, one run per method, the lr baseline off so the model
table is the only one, and row-wise Adagrad for every run:
  - fp32, fp16, bf16, int8: `compression.storage`, values stored in that format (state float32);
  - hash@F: the hashing trick (`compression.hash_buckets`) in the bytes format F's run used: fp32
    rows, as many buckets as fit in them (hash index included). What a user short of memory does
    without Cardinal's formats; the formats must beat it on AUC at equal bytes.
Saec (--saec R): the fp32 run's rows clustered after training (every row's values replaced by its
cluster's vector, then evaluated), and, with --saec-at F, fine-tuned: a run of the same recipe and
steps with `compression.saec.ratio = R`, `compression.saec.at` = F x its steps (the servers cluster
there and train on the clustered table), against an fp32 run of the same steps; both evaluate once,
at the end, the last model (results/compression_saec_finetune.md). --saec-only runs only these.
Bytes per id are measured twice: the servers' own account at the end of training (rows in their
format, hash index; summary.json's ps_emb_bytes / ps_emb_rows), and the resident memory (RSS)
one process gains holding 2M rows of each format (the `--rss-rows` check). A plot of AUC
against bytes goes to results/compression.png.
"""

import argparse
import subprocess
import time
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from movielens import data_dir  # noqa: E402
from report import RESULTS, write  # noqa: E402

from cardinal.compression.clustered import ClusteredTable, cluster_table  # noqa: E402
from cardinal.embedding import EmbeddingTable, TableConfig  # noqa: E402
from cardinal.optim import make_optimizer  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402

FORMATS = ("fp32", "fp16", "bf16", "int8")
HASHED = ("bf16", "int8")  # the hashing trick at these formats' bytes
FIELD_SHIFT = {"criteo_synthetic": 32, "movielens": 40}  # an id's field sits in its bits from here up
OPTIMIZER = "rowwise_adagrad"  # one float of state a row (TorchRec's and FBGEMM's default for embeddings): with
                               # element-wise Adagrad the float32 state would be as large as fp32 values


# fine-tuning runs and their baseline: the last model; the push that clusters waits for it (~20 s a shard here)
FINAL = ["eval.every=0", "eval.keep_best=false", "ps.timeout_s=300"]


def speed(args, dim: int) -> None:
    """samples/s of FIITED against fp32 on the same data, runs alternated so a slow moment hits both."""
    sets = [f"data.synthetic.rows={args.rows}", f"embedding.dim={dim}"]
    fiited = [*sets, f"compression.fiited.chunks={args.chunks}", f"compression.fiited.target={args.chunk_target}"]
    rates = {"fp32": [], "fiited": []}
    for k in range(args.speed):
        for name in (("fp32", "fiited") if k % 2 == 0 else ("fiited", "fp32")):
            rates[name].append(run("criteo_synthetic", sets if name == "fp32" else fiited)["samples/s"])
            print(name, f"{rates[name][-1]:,.0f} samples/s", flush=True)
    med = {k: float(np.median(v)) for k, v in rates.items()}
    rows = [{"method": k, "samples/s (median)": med[k], "runs": ", ".join(f"{x:,.0f}" for x in v)}
            for k, v in rates.items()]
    rows.append({"method": "fiited / fp32", "samples/s (median)": med["fiited"] / med["fp32"], "runs": ""})
    write("compression_speed", "FIITED's throughput against fp32 rows", rows,
          [f"the default recipe at dim {dim}, row-wise Adagrad, {args.rows:,} generated rows (one epoch), lr baseline "
           f"off; FIITED: {args.chunks} chunks a row, chunk_target {args.chunk_target}, a pass every 100 steps; runs "
           "alternate", f"reproduce: python benchmarks/compression.py --rows {args.rows} --dims {dim} --speed "
           f"{args.speed}"])


def run(recipe: str, sets: list[str], saec: tuple[float, ...] = ()) -> dict:
    """One training run; with ``saec`` ratios, also the same model evaluated with each field's rows
    clustered (every shard clusters its own rows), under results["saec"][ratio]."""
    r = load(recipe, [*sets, 'train.baseline="none"', f'sparse_optimizer.name="{OPTIMIZER}"'])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(r, Path(tmp) / "run", progress=False)
        s = trainer.fit()
        out = {"rows": s["ps_emb_rows"], "bytes": s["ps_emb_bytes"], "auc": s["eval_auc"],
               "logloss": s["eval_logloss"], "samples/s": s["samples_per_s"], "saec": {},
               "live_chunks": s.get("ps_emb_live_chunks"), "clusters": s.get("ps_emb_clusters"),
               "steps": s["steps"], "seconds": s["train_seconds"]}
        stores = trainer.client.transport.stores  # the embedded default: each shard in this process
        unclustered = trainer.evaluate()
        ids = [s_.tables["emb"].export()["ids"] for s_ in stores]
        clusterings = {}
        for ratio in saec:  # all from the trained rows, before any is applied
            start = time.perf_counter()
            parts = [cluster_table(s_.tables["emb"], shift=FIELD_SHIFT[recipe], ratio=ratio) for s_ in stores]
            clusterings[ratio] = (parts, time.perf_counter() - start)
        for ratio, (parts, seconds) in clusterings.items():
            for s_, part, mine in zip(stores, parts, ids):  # each row's values := its cluster's vector
                table = s_.tables["emb"]
                table.push(mine, part.lookup(mine) - table.pull(mine, create=False), step=trainer.step + 1,
                           kind="delta")
            clustered = trainer.evaluate()
            both = ClusteredTable.combine(parts)
            out["saec"][ratio] = {"vectors": len(both.vectors), "bytes": both.nbytes, "seconds": seconds,
                                  "auc": clustered["eval_auc"], "logloss": clustered["eval_logloss"],
                                  "unclustered_auc": unclustered["eval_auc"]}
        trainer.close()
    return out


def finetune(name: str, recipe: str, sets: list[str], dim: int, ratios, shares) -> list[dict]:
    """The unclustered fp32 run (clustered after training too) and, for each ratio and share, a run that
    clusters at that share of its steps and trains on; all evaluated once, at the end."""
    base = run(recipe, [*sets, *FINAL], ratios)
    out = []
    for ratio in ratios:
        for share in shares:
            at = max(1, int(share * base["steps"]))
            tuned = run(recipe, [*sets, *FINAL, f"compression.saec.ratio={ratio}", f"compression.saec.at={at}"])
            after = base["saec"][ratio]
            out.append({"data": name, "dim": dim, "ratio": ratio, "at": at, "steps": tuned["steps"],
                        "ids": base["rows"], "vectors": tuned["clusters"],
                        "x fewer vectors": base["rows"] / tuned["clusters"],
                        "MB unclustered": base["bytes"] / 1e6, "MB clustered": tuned["bytes"] / 1e6,
                        "AUC unclustered": f"{base['auc']:.4f}",
                        "after training": f"{after['auc'] - base['auc']:+.4f}",
                        "AUC fine-tuned": f"{tuned['auc']:.4f}",
                        "fine-tuned change": f"{tuned['auc'] - base['auc']:+.4f}",
                        "s unclustered": base["seconds"], "s fine-tuned": tuned["seconds"]})
            print(out[-1], flush=True)
    return out


def table(storage: str, dim: int, n: int) -> EmbeddingTable:
    """A table of ``n`` rows (ids 0..n-1) in ``storage``, row-wise Adagrad, as the recipe's model table."""
    t = EmbeddingTable(TableConfig("t", dim, storage=storage), make_optimizer({"name": OPTIMIZER}))
    for lo in range(0, n, 1 << 16):
        t.pull(np.arange(lo, min(n, lo + (1 << 16)), dtype=np.int64), step=1)
    return t


def buckets_for(nbytes: float, dim: int) -> int:
    """The most fp32 rows whose table (rows and hash index, as the servers account) fits in ``nbytes``."""
    lo, hi = 1, int(nbytes // (4 * dim + 16)) + 2  # more rows than that cannot fit, index or not
    while hi - lo > max(1, lo // 200):  # to 0.5%
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if table("fp32", dim, mid).nbytes <= nbytes else (lo, mid)
    return lo


def rss_per_row(storage: str, dim: int, n: int) -> float:
    """Resident bytes a table of ``n`` rows costs, per row (values, state, id, metadata, index), measured
    in a fresh process (an allocator's reused pages would blur the figure)."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import compression as c; "
            f"before = c.rss(); t = c.table({storage!r}, {dim}, {n}); print((c.rss() - before) / {n})")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["data"], r["dim"]) for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (data, dim) in zip(axes[0], panels):
        mine = [r for r in rows if r["data"] == data and r["dim"] == dim]
        for kind, marker in (("format", "o"), ("hashing trick", "x"), ("fiited", "s")):
            pts = [r for r in mine if r["kind"] == kind]
            ax.plot([r["MB"] for r in pts], [float(r["eval AUC"]) for r in pts], marker, label=kind,
                    linestyle="-" if kind == "format" else "--")
            for r in pts:
                ax.annotate(r["method"], (r["MB"], float(r["eval AUC"])), fontsize=7,
                            textcoords="offset points", xytext=(3, 3))
        ax.set_title(f"{data}, dim {dim}", fontsize=9)
        ax.set_xlabel("model table, MB (servers' account)")
        ax.set_ylabel("eval AUC")
        ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="generated training rows")
    parser.add_argument("--dims", default="16,64")
    parser.add_argument("--rss-rows", type=int, default=2_000_000)
    parser.add_argument("--saec", default="20,50", help="Saec: rows per cluster, per field")
    parser.add_argument("--saec-at", default="0.5,0.8",
                        help="Saec fine-tuning: cluster at these shares of the run's steps and train on (empty: none)")
    parser.add_argument("--saec-only", action="store_true",
                        help="only Saec: the fp32 run clustered after training and the fine-tuning runs")
    parser.add_argument("--chunks", type=int, default=4, help="FIITED: chunks a row (dims it divides)")
    parser.add_argument("--speed", type=int, default=0, metavar="N",
                        help="only FIITED's throughput: fp32 and FIITED runs alternated N times each (Zipf, last dim)")
    parser.add_argument("--chunk-target", type=float, default=0.35, help="FIITED: the share of chunks kept")
    args = parser.parse_args()
    dims = [int(d) for d in args.dims.split(",")]
    if args.speed:
        return speed(args, dims[-1])
    ratios = tuple(float(r) for r in args.saec.split(","))
    data = {"zipf": ("criteo_synthetic", [f"data.synthetic.rows={args.rows}"]),
            "movielens": ("movielens", [f'data.train=["{data_dir()}"]'])}
    shares = [float(f) for f in args.saec_at.split(",") if f]
    rows, saec_rows, tune_rows = [], [], []
    for name, (recipe, extra) in data.items():
        for dim in dims:
            sets = [*extra, f"embedding.dim={dim}"]
            if shares:
                tune_rows += finetune(name, recipe, sets, dim, ratios, shares)
            if args.saec_only:
                continue
            results = {f: run(recipe, [*sets, f'compression.storage="{f}"'], ratios if f == "fp32" else ())
                       for f in FORMATS}
            if dim % args.chunks == 0:  # FIITED: fp32 values in chunks, a share of them kept
                results[f"fiited {args.chunk_target}"] = run(recipe, [*sets, f"compression.fiited.chunks={args.chunks}",
                                                                      f"compression.fiited.target={args.chunk_target}"])
            for f in HASHED:
                buckets = buckets_for(results[f]["bytes"], dim + 1)
                results[f"hash@{f}"] = run(recipe, [*sets, f"compression.hash_buckets={buckets}"])
            base = results["fp32"]
            for method, r in results.items():
                if r["live_chunks"] is not None:  # the chunks held at the end (measured), and the wide weight
                    words = (r["live_chunks"] * (dim // args.chunks) + r["rows"]) / r["rows"]
                else:
                    words = table(method if method in FORMATS else "fp32", dim + 1, 1).format.value_words(dim + 1)
                rows.append({"data": name, "dim": dim, "method": method,
                             "kind": "hashing trick" if method.startswith("hash") else
                             "fiited" if method.startswith("fiited") else "format",
                             "rows": r["rows"], "value bytes/row": 4 * words, "bytes/id": r["bytes"] / r["rows"],
                             "MB": r["bytes"] / 1e6, "x fewer value bytes": (dim + 1) / words,
                             "x fewer MB": base["bytes"] / r["bytes"],
                             "eval AUC": f"{r['auc']:.4f}", "AUC - fp32": f"{r['auc'] - base['auc']:+.4f}",
                             "eval logloss": f"{r['logloss']:.4f}", "samples/s": r["samples/s"]})
                print(rows[-1], flush=True)
            for ratio, c in base["saec"].items():  # exported bytes: Saec's map and vectors; the trick's vectors
                plain = base["rows"] * (8 + 4 * (dim + 1))  # ids and fp32 values, what an unclustered export holds
                buckets = int(c["bytes"] / (4 * (dim + 1)))
                hashed = run(recipe, [*sets, f"compression.hash_buckets={buckets}"])
                saec_rows.append({"data": name, "dim": dim, "ratio": ratio, "ids": base["rows"],
                                  "vectors": c["vectors"], "x fewer vectors": base["rows"] / c["vectors"],
                                  "export MB": c["bytes"] / 1e6, "x fewer export bytes": plain / c["bytes"],
                                  "AUC unclustered": f"{c['unclustered_auc']:.4f}",
                                  "AUC clustered": f"{c['auc']:.4f}",
                                  "AUC change": f"{c['auc'] - c['unclustered_auc']:+.4f}",
                                  "clustering s": c["seconds"], "hash@same bytes": buckets,
                                  "its AUC": f"{hashed['auc']:.4f}"})
                print(saec_rows[-1], flush=True)
    reproduce = (f"reproduce: python benchmarks/compression.py --rows {args.rows} --dims {args.dims} --saec {args.saec} "
                 f"--saec-at {args.saec_at}{' --saec-only' if args.saec_only else ''}")
    if tune_rows:
        write("compression_saec_finetune", "Saec as the training table: clustered mid-run, fine-tuned with the map "
              "frozen, against the unclustered model of the same steps", tune_rows,
              ["unclustered: an fp32 run (row-wise Adagrad, the lr baseline off) evaluated once, at its last step; "
               "after training: its rows replaced by their cluster's vector at the end (no training after)",
               "fine-tuned: the same recipe and steps with compression.saec.ratio = ratio and "
               "compression.saec.at = at: every server clusters its rows after that step's push and trains on the "
               "clustered table (each id reads and trains its cluster's row; ids first seen later share their "
               "field's default row)",
               "ids: the unclustered run's rows at the end; vectors: the fine-tuned run's cluster rows at the end "
               "(default rows included); x fewer: ids over vectors. MB: the servers' account of the model table "
               "at the end (unclustered: rows, index; clustered: the map's 20 bytes an id, its index, cluster rows)",
               f"zipf: the default recipe on {args.rows:,} generated rows (one epoch); movielens: the shipped recipe",
               reproduce])
    if args.saec_only:
        return
    rss_rows = []
    for dim in dims:
        fp32 = rss_per_row("fp32", dim + 1, args.rss_rows)
        for f in FORMATS:
            got = fp32 if f == "fp32" else rss_per_row(f, dim + 1, args.rss_rows)
            rss_rows.append({"dim": dim, "format": f, "RSS bytes/row": got, "x fewer RSS": fp32 / got})
            print(rss_rows[-1], flush=True)
    plot(rows, RESULTS / "compression.png")
    reproduce += f" --chunks {args.chunks} --chunk-target {args.chunk_target}"
    write("compression", "Row formats against float32 and the hashing trick: bytes, AUC, speed", rows,
          ["fp16, bf16: two values a float32 word; int8: one byte a value and a float32 scale a row (words "
           "rounded up); every format keeps the optimizer's state (row-wise Adagrad: one word) in float32 and "
           "rounds stochastically",
           "value bytes/row: the stored values (x fewer: against fp32's); MB: the servers' account of the model "
           "table at the end (rows in their format, id, count, last step, hash index); bytes/id: MB over its rows",
           "hash@F: fp32 rows, ids folded into as many buckets as fit in F's MB (compression.hash_buckets)",
           f"fiited T: fp32 values in {args.chunks} chunks a row (compression.fiited.chunks), a pass every 100 steps "
           "keeping the share T of them; value bytes/row: the chunks held at the end (measured: rows made since the "
           "last pass hold all theirs) and the wide weight; MB also counts each row's chunk handles and utilities",
           f"zipf: the default recipe on {args.rows:,} generated rows; movielens: the shipped recipe; the lr "
           "baseline off; dim + 1 values a row (the wide part's first-order weight)",
           "plot: results/compression.png", reproduce])
    write("compression_saec", "Saec: each field's rows clustered after training, against the hashing trick", saec_rows,
          ["the fp32 run's model, evaluated as trained and with every row's values replaced by its cluster's vector "
           "(ratio: rows per cluster in each field; each shard clusters its own rows, weighted by their counts)",
           "export MB: sorted ids (8 bytes), cluster numbers (4) and the vectors; x fewer: against the ids and "
           "fp32 values of every row",
           "hash@same bytes: a run with the hashing trick whose vectors alone take the export's bytes (its ids need "
           "no map); its AUC beside",
           "clustering s: wall time of every shard's clustering, one after another", reproduce])
    write("compression_rss", "Resident memory per row, by row format", rss_rows,
          [f"one table of {args.rss_rows:,} rows of dim + 1 values, row-wise Adagrad, made in this process: the "
           "growth of its resident set over the rows (values, state, id, count, last step, hash index)",
           reproduce])


if __name__ == "__main__":
    main()
