"""What watching a job costs: samples/s with every server's and worker's Prometheus endpoint on,
against all off, each run by `cardinal launch` on this machine, alternating, a scraper reading
every endpoint once a second while the watched runs train (as Prometheus would).

    python benchmarks/metrics_cost.py [--steps 300] [--repeats 3] [--servers 2]

The default recipe (train.baseline "none", no checkpoints by time), one worker. Writes
results/metrics_cost.{md,json}.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

ON = ["ps.metrics_port=0", "metrics.port=0"]
OFF = ["ps.metrics_port=-1", "metrics.port=-1"]


def launch(tmp: Path, servers: int, steps: int, sets: list[str]) -> float:
    common = [f"train.steps={steps}", 'train.baseline="none"', "checkpoint.minutes=0", f'train.run_dir="{tmp}"']
    cmd = [sys.executable, "-m", "cardinal.cli", "launch", "--servers", str(servers), "--workers", "1", "--",
           *sum((["--set", s] for s in common + sets), [])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    endpoints, scraped, stop = [], [0], threading.Event()

    def scraper():  # every endpoint once a second, as a Prometheus would
        while not stop.wait(1.0):
            for e in list(endpoints):
                try:
                    urllib.request.urlopen(f"http://{e}/metrics", timeout=5).read()
                    scraped[0] += 1
                except OSError:
                    pass

    t = threading.Thread(target=scraper, daemon=True)
    t.start()
    run_dir, out = None, []
    for line in proc.stdout:
        out.append(line)
        if m := re.search(r"run directory (\S+)", line):
            run_dir = Path(m.group(1))
        endpoints += [f"127.0.0.1:{port}" for port in re.findall(r"\bmetrics=(\d+)", line)]  # a server's ready line
        if m := re.search(r"metrics on http://(\S+)/metrics", line):
            endpoints.append(m.group(1))
    stop.set()
    if proc.wait() != 0 or run_dir is None:
        raise SystemExit("".join(out[-30:]))
    if sets is ON and scraped[0] == 0:
        raise SystemExit("the watched run was never scraped")
    return json.loads((run_dir / "summary.json").read_text())["samples_per_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--servers", type=int, default=2)
    args = p.parse_args()
    rates = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="cardinal-metrics-") as tmp:
        launch(Path(tmp), args.servers, 20, OFF)  # warm: the data set generated, kernels compiled
        for r in range(args.repeats):
            for name, sets in ((("off", OFF), ("on", ON)) if r % 2 == 0 else (("on", ON), ("off", OFF))):
                rates[name].append(launch(Path(tmp), args.servers, args.steps, sets))
                print(name, f"{rates[name][-1]:,.0f} samples/s", flush=True)
    on, off = float(np.median(rates["on"])), float(np.median(rates["off"]))
    rows = [{"metrics": name, "samples/s (median)": float(np.median(v)), "runs": ", ".join(f"{x:,.0f}" for x in v)}
            for name, v in rates.items()]
    rows.append({"metrics": "on / off", "samples/s (median)": on / off, "runs": ""})
    write("metrics_cost", "What Prometheus metrics cost: samples/s with every endpoint on and scraped, against off",
          rows, [f"cardinal launch --servers {args.servers} --workers 1, the default recipe, {args.steps} steps, "
                 "baseline none; on: ps.metrics_port=0 and metrics.port=0, every endpoint scraped once a second; "
                 "off: both -1; runs alternate on and off",
                 f"reproduce: python benchmarks/metrics_cost.py --steps {args.steps} --repeats {args.repeats} "
                 f"--servers {args.servers}"])


if __name__ == "__main__":
    main()
