"""Smaller tables at the same quality, judged against the best fp32 model of the same run.

    python benchmarks/compression.py [--rows 1000000] [--dims 16,64] [--saec 20,40] [--own 0,0.5]
        [--data zipf,movielens] [--formats bf16,int8] [--name compression] [--saec-at F,..] [--saec-only]

For each data set (criteo_synthetic with --rows generated rows, Zipf ids; movielens on
ml-latest-small) and each embedding dim, the lr baseline off so the model table is the only one:
  - fp32 twice, element-wise Adagrad and row-wise Adagrad, each at the lr the rowwise benchmark
    found best for both (results/rowwise*.md; movielens: the recipe's): the better AUC is "best",
    and every method is reported as AUC - best and as whole bytes per id against best's;
  - the formats (`compression.storage`, values in that format, state float32), FIITED
    (`compression.fiited.*`) and the hashing trick at int8's bytes (`compression.hash_buckets`),
    each with row-wise Adagrad (one word of state a row: what compact rows pair with);
  - Saec (--saec R, --own S): the row-wise fp32 run's rows clustered after training, R rows a
    cluster in each field, the share S of a field's clusters kept by its most frequent ids, one
    each (frequency-aware; 0: plain), evaluated; with --saec-at, fine-tuned runs too
    (results/compression_saec_finetune.md). --saec-only runs only these.
Bytes are the servers' own account at the end of training (summary.json's ps_emb_bytes): every
row's id, count, last step, values and optimizer state, the hash index's slots, FIITED's chunk
pool; per id: over the distinct ids the data has (the best run's rows; the hashing trick holds
fewer rows than ids). FIITED's and fp32's bytes are compared at every metrics line of their runs
(results/compression_curve.md). Resident memory per row is measured besides (--rss-rows), and a
plot of AUC against bytes goes to results/compression.png.
"""

import argparse
import json
import subprocess
import time
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from movielens import BEFORE_SWEEP, data_dir  # noqa: E402
from report import RESULTS, write  # noqa: E402

from cardinal.compression.clustered import ClusteredTable, cluster_table  # noqa: E402
from cardinal.embedding import EmbeddingTable, TableConfig  # noqa: E402
from cardinal.optim import make_optimizer  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402

FIELD_SHIFT = {"criteo_synthetic": 32, "movielens": 40}  # an id's field sits in its bits from here up
ROWWISE, ADAGRAD = "rowwise_adagrad", "adagrad"  # row-wise: one float of state a row (TorchRec's and FBGEMM's
                                                 # default for embeddings), what every compressed run uses
LR = {("zipf", 16): 0.05, ("zipf", 64): 0.03}  # both optimizers' best lr in results/rowwise.md (200k rows) and
                                              # rowwise_3m.md (3M, dim 16); movielens: the recipe's


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


def run(recipe: str, sets: list[str], saec: tuple = (), optimizer: str = ROWWISE) -> dict:
    """One training run with ``optimizer``; with ``saec`` (ratio, own) pairs, also the same model
    evaluated with each field's rows clustered (every shard clusters its own rows), under
    results["saec"][(ratio, own)]. "curve": (step, ps_emb_bytes) from metrics.jsonl."""
    mine = load(recipe, sets).sparse_optimizer  # a new name drops the file's other keys: set them again
    r = load(recipe, [*sets, 'train.baseline="none"', f'sparse_optimizer.name="{optimizer}"',
                      *(f"sparse_optimizer.{k}={json.dumps(v)}" for k, v in mine.items() if k != "name")])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(r, Path(tmp) / "run", progress=False)
        s = trainer.fit()
        lines = [json.loads(x) for x in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines() if x]
        out = {"rows": s["ps_emb_rows"], "bytes": s["ps_emb_bytes"], "auc": s["eval_auc"],
               "logloss": s["eval_logloss"], "samples/s": s["samples_per_s"], "saec": {},
               "live_chunks": s.get("ps_emb_live_chunks"), "clusters": s.get("ps_emb_clusters"),
               "steps": s["steps"], "seconds": s["train_seconds"], "optimizer": optimizer,
               "lr": r.sparse_optimizer.get("lr"),
               "curve": [(x["step"], x["ps_emb_bytes"]) for x in lines if "ps_emb_bytes" in x]}
        stores = trainer.client.transport.stores  # the embedded default: each shard in this process
        unclustered = trainer.evaluate()
        ids = [s_.tables["emb"].export()["ids"] for s_ in stores]
        clusterings = {}
        for ratio, own in saec:  # all from the trained rows, before any is applied
            start = time.perf_counter()
            parts = [cluster_table(s_.tables["emb"], shift=FIELD_SHIFT[recipe], ratio=ratio, own=own)
                     for s_ in stores]
            clusterings[ratio, own] = (parts, time.perf_counter() - start)
        before = [s_.tables["emb"].pull(mine, create=False) for s_, mine in zip(stores, ids)]
        for key, (parts, seconds) in clusterings.items():
            for s_, part, mine, was in zip(stores, parts, ids, before):  # each row's values := its cluster's
                table = s_.tables["emb"]
                table.push(mine, part.lookup(mine) - table.pull(mine, create=False), step=trainer.step + 1,
                           kind="delta")
            clustered = trainer.evaluate()
            for s_, mine, was in zip(stores, ids, before):  # back to the trained rows for the next clustering
                table = s_.tables["emb"]
                table.push(mine, was - table.pull(mine, create=False), step=trainer.step + 1, kind="delta")
            both = ClusteredTable.combine(parts)
            out["saec"][key] = {"vectors": len(both.vectors), "bytes": both.nbytes, "seconds": seconds,
                                "auc": clustered["eval_auc"], "logloss": clustered["eval_logloss"],
                                "unclustered_auc": unclustered["eval_auc"]}
        trainer.close()
    print(f"run {optimizer} {' '.join(sets)}: AUC {out['auc']:.4f}, {out['bytes'] / out['rows']:.1f} bytes a row, "
          f"{out['rows']:,} rows, {out['seconds']:.0f} s", flush=True)
    return out


def finetune(name: str, recipe: str, sets: list[str], dim: int, ratios, shares) -> list[dict]:
    """The unclustered fp32 run (clustered after training too) and, for each ratio and share, a run that
    clusters at that share of its steps and trains on; all evaluated once, at the end."""
    base = run(recipe, [*sets, *FINAL], tuple((r, 0.0) for r in ratios))  # the servers cluster plainly
    out = []
    for ratio in ratios:
        for share in shares:
            at = max(1, int(share * base["steps"]))
            tuned = run(recipe, [*sets, *FINAL, f"compression.saec.ratio={ratio}", f"compression.saec.at={at}"])
            after = base["saec"][ratio, 0.0]
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
    t = EmbeddingTable(TableConfig("t", dim, storage=storage), make_optimizer({"name": ROWWISE}))
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


def tables(args, rows: list[dict], saec_rows: list[dict], curves: list, reproduce: str) -> None:
    """results/NAME.md, _saec.md, _curve.md and the plot, from the panels run so far."""
    plot(rows, RESULTS / f"{args.name}.png")
    lrs = ", ".join(f"{k[0]} dim {k[1]}: {v}" for k, v in LR.items())
    write(args.name, "Row formats, FIITED and the hashing trick against the best fp32 model: whole bytes per "
          "id, AUC", rows,
          ["best: the better of fp32 with element-wise Adagrad (fp32 adagrad) and with row-wise Adagrad (fp32), "
           f"each at its best lr from results/rowwise*.md ({lrs}; movielens: the recipe's, 0.02), the recipe's "
           "other sparse_optimizer keys (initial_accumulator 1e-6 on zipf) for both; every other method: row-wise "
           "Adagrad, the same settings (one float of state a row, what compact rows pair with)",
           "bytes/id: the servers' account at the end (ps_emb_bytes) over the distinct ids (the fp32 run's rows): "
           "a row's id (8 bytes), count (4), last step (4), its values in their format and the optimizer's state "
           "(float32: element-wise Adagrad dim + 1 words, row-wise 1), the hash index's slots (5 bytes a slot, "
           "load <= 0.7), FIITED's chunk pool; x fewer: best's (or fp32 row-wise's) bytes over the method's",
           "value bytes/row: the stored values alone (fp16, bf16: two a word; int8: a byte each and a float32 "
           "scale, words rounded up; formats round stochastically)",
           "hash@F: fp32 rows, ids folded into as many buckets as fit in F's MB (compression.hash_buckets)",
           f"fiited T: fp32 values in {args.chunks} chunks a row (compression.fiited.chunks), a pass every 100 steps "
           "keeping the share T of them; a new row holds the chunks that fit in a plain row's words until a pass "
           "(dim 16: 2, dim 64: 3); value bytes/row: the chunks held at the end and the wide weight; MB also "
           "counts each row's chunk handles and utilities (2 words a chunk)",
           f"zipf: the default recipe on {args.rows:,} generated rows (one epoch); movielens: the recipe before its sweep "
           "(benchmarks/movielens.py BEFORE_SWEEP: one shared table); "
           "the lr baseline off; dim + 1 values a row (the wide part's first-order weight)",
           "samples/s: one run each, not alternated (FIITED's against fp32's: --speed)",
           f"plot: results/{args.name}.png", reproduce])
    if saec_rows:
        write(f"{args.name}_saec", "Saec: each field's rows clustered after training, plainly and frequency-aware, "
              "against the best fp32 model", saec_rows,
              [f"the row-wise fp32 run's last model (AUC row-wise; {args.name}.md's eval AUC is the best kept "
               "model's), evaluated with every row's values replaced by its "
               "cluster's vector (ratio: rows per cluster in each field, at least 16 clusters a field; each shard "
               "clusters its own rows, weighted by their counts); AUC - best: against the best fp32 model "
               f"(results/{args.name}.md)",
               "own: the share of a field's clusters that its most frequent ids keep, one each, exact "
               "(frequency-aware, compression/saec.py); only the other ids are clustered, into the rest; 0: plain",
               "vectors: every cluster vector (own rows included); x fewer: ids over vectors",
               "export MB: sorted ids (8 bytes), cluster numbers (4) and the vectors; x fewer: against the ids and "
               "fp32 values of every row",
               "clustering s: wall time of every shard's clustering, one after another", reproduce])
    if curves:
        curve_rows = []
        for name, dim, plain, chunked in curves:
            at = dict(plain)
            ratios_ = [(s_, b / at[s_]) for s_, b in chunked if s_ in at]
            worst = max(ratios_, key=lambda x: x[1])
            curve_rows.append({"data": name, "dim": dim, "points": len(ratios_), "max FIITED / fp32": worst[1],
                               "at step": worst[0], "first pass": 100,
                               "before it (max)": max((r for s_, r in ratios_ if s_ < 100), default=float("nan")),
                               "at the end": ratios_[-1][1]})
        write(f"{args.name}_curve", "FIITED's bytes against fp32 row-wise's over a run", curve_rows,
              [f"ps_emb_bytes of the FIITED and the fp32 (row-wise) runs of results/{args.name}.md at every "
               "metrics line (metrics.log_every steps), their ratio at the same step; the largest, and where",
               reproduce], extra={"curves": [{"data": n, "dim": d, "fp32": p, "fiited": c} for n, d, p, c in curves]})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="generated training rows")
    parser.add_argument("--dims", default="16,64")
    parser.add_argument("--data", default="zipf,movielens")
    parser.add_argument("--name", default="compression", help="results/NAME.md, NAME_saec.md, NAME_curve.md")
    parser.add_argument("--formats", default="bf16,int8", help="row formats besides fp32 (fp16's bytes are bf16's)")
    parser.add_argument("--rss-rows", type=int, default=2_000_000, help="0: no resident-memory table")
    parser.add_argument("--saec", default="20,40", help="Saec: rows per cluster, per field")
    parser.add_argument("--own", default="0,0.5", help="Saec: shares of a field's clusters its most frequent ids keep")
    parser.add_argument("--saec-at", default="",
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
    ratios = tuple(float(r) for r in args.saec.split(",") if r)
    pairs = tuple((r, float(o)) for r in ratios for o in args.own.split(","))
    data = {"zipf": ("criteo_synthetic", [f"data.synthetic.rows={args.rows}"]),
            "movielens": ("movielens", [f'data.train=["{data_dir()}"]', *BEFORE_SWEEP])}
    data = {k: data[k] for k in args.data.split(",")}
    shares = [float(f) for f in args.saec_at.split(",") if f]
    rows, saec_rows, tune_rows, curves = [], [], [], []
    reproduce = (f"reproduce: python benchmarks/compression.py --rows {args.rows} --dims {args.dims} "
                 f"--data {args.data} --name {args.name} "
                 f"--formats {args.formats} --saec {args.saec} --own {args.own}"
                 f"{f' --saec-at {args.saec_at}' if args.saec_at else ''}{' --saec-only' if args.saec_only else ''}")
    reproduce += f" --chunks {args.chunks} --chunk-target {args.chunk_target}"
    reproduce += f" --rss-rows {args.rss_rows}" if args.rss_rows != parser.get_default("rss_rows") else ""
    for name, (recipe, extra) in data.items():
        for dim in dims:
            sets = [*extra, f"embedding.dim={dim}", *([f"sparse_optimizer.lr={LR[name, dim]}"]
                                                      if (name, dim) in LR else [])]
            if shares:
                tune_rows += finetune(name, recipe, sets, dim, ratios, shares)
            if args.saec_only:
                continue
            results = {"fp32 adagrad": run(recipe, sets, optimizer=ADAGRAD), "fp32": run(recipe, sets, pairs)}
            for f in args.formats.split(","):
                results[f] = run(recipe, [*sets, f'compression.storage="{f}"'])
            if dim % args.chunks == 0:  # FIITED: fp32 values in chunks, a share of them kept
                results[f"fiited {args.chunk_target}"] = run(recipe, [*sets, f"compression.fiited.chunks={args.chunks}",
                                                                      f"compression.fiited.target={args.chunk_target}"])
                curves.append((name, dim, results["fp32"]["curve"], results[f"fiited {args.chunk_target}"]["curve"]))
            small = min((f for f in args.formats.split(",")), key=lambda f: results[f]["bytes"])
            buckets = buckets_for(results[small]["bytes"], dim + 1)
            results[f"hash@{small}"] = run(recipe, [*sets, f"compression.hash_buckets={buckets}"])
            best_name = max(("fp32 adagrad", "fp32"), key=lambda k: results[k]["auc"])
            best, rw, ids = results[best_name], results["fp32"], results["fp32"]["rows"]
            for method, r in results.items():
                if r["live_chunks"] is not None:  # the chunks held at the end (measured), and the wide weight
                    words = (r["live_chunks"] * (dim // args.chunks) + r["rows"]) / r["rows"]
                else:
                    fmt = method if method in args.formats.split(",") else "fp32"
                    words = table(fmt, dim + 1, 1).format.value_words(dim + 1)
                rows.append({"data": name, "dim": dim, "method": method + (" (best)" if method == best_name else ""),
                             "kind": "hashing trick" if method.startswith("hash") else
                             "fiited" if method.startswith("fiited") else "format",
                             "optimizer": r["optimizer"], "lr": r["lr"], "rows": r["rows"],
                             "value bytes/row": 4 * words, "bytes/id": r["bytes"] / ids, "MB": r["bytes"] / 1e6,
                             "x fewer bytes than best": best["bytes"] / r["bytes"],
                             "than fp32 row-wise": rw["bytes"] / r["bytes"],
                             "eval AUC": f"{r['auc']:.4f}", "AUC - best": f"{r['auc'] - best['auc']:+.4f}",
                             "eval logloss": f"{r['logloss']:.4f}", "samples/s": r["samples/s"]})
                print(rows[-1], flush=True)
            for (ratio, own), c in rw["saec"].items():
                plain = rw["rows"] * (8 + 4 * (dim + 1))  # ids and fp32 values, what an unclustered export holds
                saec_rows.append({"data": name, "dim": dim, "ratio": ratio, "own": own, "ids": rw["rows"],
                                  "vectors": c["vectors"], "x fewer vectors": rw["rows"] / c["vectors"],
                                  "export MB": c["bytes"] / 1e6, "x fewer export bytes": plain / c["bytes"],
                                  "AUC best": f"{best['auc']:.4f}",
                                  "AUC row-wise": f"{c['unclustered_auc']:.4f}",
                                  "AUC clustered": f"{c['auc']:.4f}", "AUC - best": f"{c['auc'] - best['auc']:+.4f}",
                                  "clustering s": c["seconds"]})
                print(saec_rows[-1], flush=True)
            tables(args, rows, saec_rows, curves, reproduce)  # a panel at a time: a long run keeps what it has
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
    for dim in dims if args.rss_rows else ():
        fp32 = rss_per_row("fp32", dim + 1, args.rss_rows)
        for f in ("fp32", *args.formats.split(",")):
            got = fp32 if f == "fp32" else rss_per_row(f, dim + 1, args.rss_rows)
            rss_rows.append({"dim": dim, "format": f, "RSS bytes/row": got, "x fewer RSS": fp32 / got})
            print(rss_rows[-1], flush=True)
    if not rss_rows:
        return
    write("compression_rss", "Resident memory per row, by row format", rss_rows,
          [f"one table of {args.rss_rows:,} rows of dim + 1 values, row-wise Adagrad, made in this process: the "
           "growth of its resident set over the rows (values, state, id, count, last step, hash index)",
           reproduce])


if __name__ == "__main__":
    main()
