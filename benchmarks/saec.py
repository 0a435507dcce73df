"""Saec's clustering at scale: a skewed field of --rows ids into --k shared vectors.

    python benchmarks/saec.py [--rows 10000000] [--k 50000] [--dim 16] [--rounds 3]

Data (numpy default_rng(0)): 2,000 Gaussian blobs (centres N(0, 1), spread 0.3 per coordinate);
each row falls in blob b with probability proportional to (b + 1)^-1.1, so blob traffic follows the
ids' Zipf law; the id of rank r (ranks shuffled over the rows) was seen max(1, (rows / r)^1.1) times.

Rows of the table: Saec on all rows (the target: 10M rows in under 60 s on 2 cores), then at a
1,000,000-row subsample (the first rows; k scaled to keep rows per cluster) Saec against plain
count-weighted Lloyd over all rows with the same seeds and rounds, searched by brute force with
float32 matmuls in blocks (|c|^2 - 2 x.c: numpy's obvious k-means). Inertia is recomputed for
both in float64 from the assignments: per row, and per sighting (the mean squared error a lookup sees).
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.compression import cluster  # noqa: E402
from cardinal import parallel  # noqa: E402

BLOBS = 2000
SUBSAMPLE = 1_000_000


def generate(rows: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((BLOBS, dim), dtype=np.float32)
    p = np.arange(1, BLOBS + 1) ** -1.1
    blob = rng.choice(BLOBS, rows, p=p / p.sum())
    values = centres[blob] + np.float32(0.3) * rng.standard_normal((rows, dim), dtype=np.float32)
    counts = np.maximum(1, (rows / np.arange(1, rows + 1)) ** 1.1).astype(np.int64)[rng.permutation(rows)]
    return values, counts


def plain_lloyd(values, counts, k: int, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """Count-weighted Lloyd over every row, seeds the k most frequent rows, brute-force search."""
    centroids = values[np.argsort(-counts, kind="stable")[:k]].copy()
    weights = counts.astype(np.float64)
    assign = np.empty(len(values), np.int64)
    for i in range(rounds + 1):
        cc = (centroids * centroids).sum(1)
        step = max(1, 2**24 // k)  # rows per matmul: 64 MB of distances
        for lo in range(0, len(values), step):
            assign[lo:lo + step] = np.argmin(cc - 2 * values[lo:lo + step] @ centroids.T, axis=1)
        if i < rounds:
            mass = np.bincount(assign, weights, k)
            sums = np.stack([np.bincount(assign, weights * values[:, j], k) for j in range(values.shape[1])], 1)
            centroids[mass > 0] = (sums[mass > 0] / mass[mass > 0, None]).astype(np.float32)
    return assign, centroids


def inertia(values, counts, assign, centroids) -> float:
    out = 0.0
    for lo in range(0, len(values), 1 << 20):
        diff = values[lo:lo + (1 << 20)].astype(np.float64) - centroids[assign[lo:lo + (1 << 20)]]
        out += float(counts[lo:lo + (1 << 20)] @ (diff * diff).sum(1))
    return out


def row(run, values, counts, k, head, rounds, seconds, assign, centroids) -> dict:
    loss = inertia(values, counts, assign, centroids)
    return {"run": run, "rows": len(values), "k": k, "head": head, "rounds": rounds, "seconds": seconds,
            "rows/s": len(values) / seconds, "inertia/row": loss / len(values),
            "inertia/sighting": loss / float(counts.sum())}


def saec(values, counts, k, rounds, name) -> dict:
    start = time.perf_counter()
    got = cluster(values, counts, k, rounds=rounds)
    seconds = time.perf_counter() - start
    head = min(len(values), max(20 * k, 4096))
    out = row(name, values, counts, k, head, rounds, seconds, got.assign, got.centroids)
    assert abs(out["inertia/row"] * len(values) - got.inertia) <= 1e-6 * got.inertia
    print(out, flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--k", type=int, default=50_000, help="clusters (shared vectors)")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="Lloyd rounds on the head")
    args = parser.parse_args()
    values, counts = generate(args.rows, args.dim)
    load = os.getloadavg()[0]  # the machine may be shared: a busy one slows every row here
    cluster(values[:5000], counts[:5000], 50)  # compiles the kernels outside the timings
    rows = [saec(values, counts, args.k, args.rounds, "saec")]
    sub, sub_counts = values[:SUBSAMPLE], counts[:SUBSAMPLE]
    k_sub = max(1, args.k * len(sub) // args.rows)
    rows.append(saec(sub, sub_counts, k_sub, args.rounds, "saec, subsample"))
    start = time.perf_counter()
    assign, centroids = plain_lloyd(sub, sub_counts, k_sub, args.rounds)
    rows.append(row("plain Lloyd, subsample", sub, sub_counts, k_sub, len(sub), args.rounds,
                    time.perf_counter() - start, assign, centroids))
    print(rows[-1], flush=True)
    for r in rows:
        r["vs plain"] = rows[2]["seconds"] / r["seconds"] if r["rows"] == len(sub) else "-"
    write("saec", "Saec clustering: frequency-guided k-means, 10M rows", rows, [
        (f"{args.dim}-d rows in {BLOBS:,} Gaussian blobs, blob traffic and id counts Zipf(1.1); seconds: wall "
         f"time of cluster() (data generation and numba compilation excluded), on {parallel.threads()} kernel "
         f"threads; load average before: {load:.2f}"),
        ("saec: seeds = the k most frequent rows, count-weighted Lloyd rounds on the head (the 20 k most frequent "
         "rows), then one exact nearest-centroid pass over every row"),
        ("plain Lloyd: the same seeds and rounds over every row, then a last assignment; brute force (float32 "
         "matmuls, numpy's BLAS threads); vs plain: its seconds / this run's"),
        "inertia: sum over rows of count * squared distance to its centroid, float64; per sighting: / sum of counts",
        (f"reproduce: python benchmarks/saec.py --rows {args.rows} --k {args.k} --dim {args.dim} "
         f"--rounds {args.rounds}")])
    return rows


if __name__ == "__main__":
    main()
