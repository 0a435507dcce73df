"""Smaller tables at the same quality: row formats against float32 and the hashing trick.

    python benchmarks/compression.py [--rows 1000000] [--dims 16,64]

For each data set (criteo_synthetic with --rows generated rows, Zipf ids; movielens on
ml-latest-small) and each embedding dim, one run per method, the lr baseline off so the model
table is the only one, and row-wise Adagrad for every run:
  - fp32, fp16, bf16, int8: `embedding.storage`, values stored in that format (state float32);
  - hash@F: the hashing trick (`embedding.hash_buckets`) in the bytes format F's run used: fp32
    rows, as many buckets as fit in them (hash index included). What a user short of memory does
    without Cardinal's formats; the formats must beat it on AUC at equal bytes.
Bytes per id are measured twice: the servers' own account at the end of training (rows in their
format, hash index; summary.json's ps_emb_bytes / ps_emb_rows), and the resident memory (RSS)
one process gains holding 2M rows of each format (the `--rss-rows` check). A plot of AUC
against bytes goes to results/compression.png.
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from movielens import data_dir  # noqa: E402
from report import RESULTS, write  # noqa: E402

from cardinal.embedding import EmbeddingTable, TableConfig  # noqa: E402
from cardinal.optim import make_optimizer  # noqa: E402
from cardinal.train import Trainer, config  # noqa: E402

FORMATS = ("fp32", "fp16", "bf16", "int8")
HASHED = ("bf16", "int8")  # the hashing trick at these formats' bytes
OPTIMIZER = "rowwise_adagrad"  # one float of state a row (TorchRec's and FBGEMM's default for embeddings): with
                               # element-wise Adagrad the float32 state would be as large as fp32 values


def run(recipe: str, sets: list[str]) -> dict:
    r = config.load(recipe, [*sets, 'train.baseline="none"', f'sparse_optimizer.name="{OPTIMIZER}"'])
    with tempfile.TemporaryDirectory() as tmp:
        s = Trainer(r, Path(tmp) / "run", progress=False).fit()
    return {"rows": s["ps_emb_rows"], "bytes": s["ps_emb_bytes"], "auc": s["eval_auc"], "logloss": s["eval_logloss"],
            "samples/s": s["samples_per_s"]}


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
        for kind, marker in (("format", "o"), ("hashing trick", "x")):
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
    args = parser.parse_args()
    dims = [int(d) for d in args.dims.split(",")]
    data = {"zipf": ("criteo_synthetic", [f"data.synthetic.rows={args.rows}"]),
            "movielens": ("movielens", [f'data.train=["{data_dir()}"]'])}
    rows = []
    for name, (recipe, extra) in data.items():
        for dim in dims:
            sets = [*extra, f"embedding.dim={dim}"]
            results = {f: run(recipe, [*sets, f'embedding.storage="{f}"']) for f in FORMATS}
            for f in HASHED:
                buckets = buckets_for(results[f]["bytes"], dim + 1)
                results[f"hash@{f}"] = run(recipe, [*sets, f"embedding.hash_buckets={buckets}"])
            base = results["fp32"]
            for method, r in results.items():
                words = table(method if method in FORMATS else "fp32", dim + 1, 1).format.value_words(dim + 1)
                rows.append({"data": name, "dim": dim, "method": method,
                             "kind": "hashing trick" if method.startswith("hash") else "format",
                             "rows": r["rows"], "value bytes/row": 4 * words, "bytes/id": r["bytes"] / r["rows"],
                             "MB": r["bytes"] / 1e6, "x fewer value bytes": (dim + 1) / words,
                             "x fewer MB": base["bytes"] / r["bytes"],
                             "eval AUC": f"{r['auc']:.4f}", "AUC - fp32": f"{r['auc'] - base['auc']:+.4f}",
                             "eval logloss": f"{r['logloss']:.4f}", "samples/s": r["samples/s"]})
                print(rows[-1], flush=True)
    rss_rows = []
    for dim in dims:
        fp32 = rss_per_row("fp32", dim + 1, args.rss_rows)
        for f in FORMATS:
            got = fp32 if f == "fp32" else rss_per_row(f, dim + 1, args.rss_rows)
            rss_rows.append({"dim": dim, "format": f, "RSS bytes/row": got, "x fewer RSS": fp32 / got})
            print(rss_rows[-1], flush=True)
    plot(rows, RESULTS / "compression.png")
    reproduce = f"reproduce: python benchmarks/compression.py --rows {args.rows} --dims {args.dims}"
    write("compression", "Row formats against float32 and the hashing trick: bytes, AUC, speed", rows,
          ["fp16, bf16: two values a float32 word; int8: one byte a value and a float32 scale a row (words "
           "rounded up); every format keeps the optimizer's state (row-wise Adagrad: one word) in float32 and "
           "rounds stochastically",
           "value bytes/row: the stored values (x fewer: against fp32's); MB: the servers' account of the model "
           "table at the end (rows in their format, id, count, last step, hash index); bytes/id: MB over its rows",
           "hash@F: fp32 rows, ids folded into as many buckets as fit in F's MB (embedding.hash_buckets)",
           f"zipf: the default recipe on {args.rows:,} generated rows; movielens: the shipped recipe; the lr "
           "baseline off; dim + 1 values a row (the wide part's first-order weight)",
           "plot: results/compression.png", reproduce])
    write("compression_rss", "Resident memory per row, by row format", rss_rows,
          [f"one table of {args.rss_rows:,} rows of dim + 1 values, row-wise Adagrad, made in this process: the "
           "growth of its resident set over the rows (values, state, id, count, last step, hash index)",
           reproduce])


if __name__ == "__main__":
    main()
