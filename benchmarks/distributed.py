"""Training throughput on parameter-server processes against the embedded default.

    python benchmarks/distributed.py [--rows N]

The default recipe (DeepFM, dim 16, batch 4096; 3M generated rows unless ``--rows``) on the
same generated data, one epoch:
  - embedded: one process, 4 in-process shards (the default);
  - 1 x 1:    ``cardinal launch --servers 1 --workers 1``;
  - 2 x 2:    ``cardinal launch --servers 2 --workers 2``.
Samples/s is training samples over training time (all workers together); traffic is the
gRPC message bytes each training sample costs.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.train import Trainer, config  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=0, help="generated rows (default: the recipe's)")
    args = parser.parse_args()
    sets = [f"data.synthetic.rows={args.rows}"] if args.rows else []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        recipe = config.load("criteo_synthetic", sets)
        base = Trainer(recipe, Path(tmp) / "embedded", progress=False).fit()
        rows.append(_row("embedded (4 in-process shards)", base, base))
        for servers, workers in ((1, 1), (2, 2)):
            cmd = [sys.executable, "-m", "cardinal.cli", "launch", "--servers", str(servers), "--workers", str(workers),
                   "--", *sum((["--set", s] for s in [*sets, f'train.run_dir="{tmp}/runs"']), [])]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            if out.returncode != 0:
                raise SystemExit(out.stdout[-3000:] + out.stderr[-3000:])
            run_dir = Path(re.search(r"run directory (\S+)", out.stdout).group(1))
            rows.append(_row(f"{servers} server x {workers} worker", json.loads((run_dir / "summary.json").read_text()), base))
    write("distributed", "Parameter servers as processes vs the embedded default (DeepFM, batch 4096)", rows, [
        f"{recipe.data.synthetic.rows:,} generated rows, one epoch; servers and workers share this machine's cores",
        "traffic: gRPC message bytes (requests + replies) per training sample",
        "reproduce: python benchmarks/distributed.py"])


def _row(name, s, base):
    traffic = (s.get("bytes_sent", 0) + s.get("bytes_received", 0)) / s["samples"]
    return {"run": name, "samples/s": s["samples_per_s"], "time vs embedded": base["samples_per_s"] / s["samples_per_s"],
            "eval AUC": s["eval_auc"], "bytes/sample": traffic}


if __name__ == "__main__":
    main()
