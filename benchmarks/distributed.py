"""Training throughput on parameter-server processes against the embedded default.

    python benchmarks/distributed.py [--rows N]

The default recipe (DeepFM, dim 16, batch 4096; 3M generated rows unless ``--rows``) on the
same generated data, one epoch:
  - embedded: one process, 4 in-process shards (the default);
  - 1 x 1:    ``cardinal launch --servers 1 --workers 1``;
  - 2 x 2:    ``cardinal launch --servers 2 --workers 2``.
Samples/s is training samples over training time (all workers together); traffic is the
gRPC message bytes each training sample costs.

It also holds a quality figure the test suite once paid three minutes for: two servers and two
workers (sync across workers, the default for a job) reach the embedded run's eval AUC on the
default recipe, within ``AUC_TOLERANCE``; the benchmark exits 1 when they do not. The suite keeps
the correctness of it, cheaply: W sync workers train the model one process trains
(``test_sync_workers_on_a_global_batch_train_the_embedded_model``, 12 steps on tiny data).
"""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import jobs  # noqa: E402
from report import write  # noqa: E402

from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402

AUC_TOLERANCE = 0.01  # 2 x 2 against the embedded run's eval AUC


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=0, help="generated rows (default: the recipe's)")
    args = parser.parse_args()
    sets = [f"data.synthetic.rows={args.rows}"] if args.rows else []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        recipe = load("criteo_synthetic", sets)
        base = Trainer(recipe, Path(tmp) / "embedded", progress=False).fit()
        rows.append(_row("embedded (4 in-process shards)", base, base))
        for servers, workers in ((1, 1), (2, 2)):
            run = jobs.launch(servers, workers, sets, Path(tmp) / f"{servers}x{workers}", timeout_s=3600)
            if run.summary is None:
                raise SystemExit(f"{servers} x {workers} failed (exit {run.code}):\n{run.tail()}")
            rows.append(_row(f"{servers} server x {workers} worker", run.summary, base))
    write("distributed", "Parameter servers as processes vs the embedded default (DeepFM, batch 4096)", rows, [
        f"{recipe.data.synthetic.rows:,} generated rows, one epoch; servers and workers share this machine's cores",
        "traffic: gRPC message bytes (requests + replies) per training sample",
        f"AUC vs embedded: the 2 x 2 job is to be within {AUC_TOLERANCE} of the embedded run's eval AUC",
        "reproduce: python benchmarks/distributed.py"])
    off = abs(rows[-1]["eval AUC"] - rows[0]["eval AUC"])
    if off >= AUC_TOLERANCE:
        raise SystemExit(f"2 x 2 eval AUC {rows[-1]['eval AUC']:.4f} is {off:.4f} from the embedded run's "
                         f"{rows[0]['eval AUC']:.4f} (tolerance {AUC_TOLERANCE})")


def _row(name, s, base):
    traffic = jobs.traffic_per_sample(s) or 0.0
    return {"run": name, "samples/s": s["samples_per_s"], "time vs embedded": base["samples_per_s"] / s["samples_per_s"],
            "eval AUC": s["eval_auc"], "AUC vs embedded": s["eval_auc"] - base["eval_auc"], "bytes/sample": traffic}


if __name__ == "__main__":
    main()
