"""The network as the bottleneck: Cardinal's communication features on shaped links, side by side.

    python benchmarks/network.py [--rates 150,1000] [--sweep 50,150,400,1000,0] [--rows 200000] [--quick]
    python benchmarks/network.py --only "cache s=1,best" --tag cache     # some rows (and fp32): network_cache.*

Four hosts on this machine (network namespaces on a bridge, ``tests/helpers/hosts.py``): two
servers (``cardinal server``, one shard each) and two workers (``torchrun``, one a host), as the
docs' across-machines commands run them. Every host's sending side is shaped with ``tc``: a
token-bucket rate (``tbf``; 0: not shaped) and, where the kernel has ``sch_netem``, a delay (this
machine's and CI's have none: the table says so). Each row is one job on the default recipe with
per-field tables (``embedding.shared = false``, so a plan can place tables and copy hot rows), one
epoch of ``--rows`` generated rows, batch 4096, sync, the same data for every row:

    fp32                 rows and gradients as fp32, no cache: the baseline every ratio is against
    bf16 both ways       wire.pull = wire.push = "bf16"
    int8 pulls           wire.pull = "int8" (a scale a row)
    cache s=1, 2, 4      a worker cache of hot rows (cache.bytes), cache.staleness = s
    planner              the planner's plan (``cardinal plan``): tables whole on one server where
                         the load stays balanced, fewer requests a step
    planner + copies     the same with the hottest ids of the largest tables copied to both servers
    best                 int8 pulls, bf16 pushes, the cache at s=1, the planner's plan (a cache and
                         copies of hot rows do not combine: their staleness bounds would add up)

Columns: samples/s (training samples of both workers over the training time, from summary.json),
bytes per sample each way (gRPC requests / replies of both workers), eval AUC and logloss, and
each against fp32. ``--sweep``: fp32 and best at each rate, for the plot of samples/s against the
link rate. Writes results/network.{md,json,png} (network_quick.* with --quick).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import report
from jobs import set_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the hosts harness the tests use
from helpers.hosts import Hosts, unavailable  # noqa: E402

ENV = {**os.environ, "CARDINAL_TOKEN": "bench", "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "eth0"}
ME = [sys.executable, "-m", "cardinal.cli"]
CACHE = "cache.bytes=\"4MB\""
RUN_TIMEOUT_S = 900


def configs(plan: Path, copies: Path) -> dict[str, list[str]]:
    return {
        "fp32": [],
        "bf16 both ways": ['wire.pull="bf16"', 'wire.push="bf16"'],
        "int8 pulls": ['wire.pull="int8"'],
        "cache s=1": [CACHE, "cache.staleness=1"],
        "cache s=2": [CACHE, "cache.staleness=2"],
        "cache s=4": [CACHE, "cache.staleness=4"],
        "planner": [f'plan.layout="{plan}"'],
        "planner + copies": [f'plan.layout="{copies}"'],
        "best": ['wire.pull="int8"', 'wire.push="bf16"', CACHE, "cache.staleness=1", f'plan.layout="{plan}"'],
    }


def base_sets(rows: int, eval_rows: int, data: Path) -> list[str]:
    return ['ps.job="network"', "embedding.shared=false", f"data.synthetic.rows={rows}",
            f"data.synthetic.eval_rows={eval_rows}", "data.batch_size=4096", f'data.cache_dir="{data}"',
            'consistency.mode="sync"', "eval.every=0", 'train.baseline="none"', "checkpoint.minutes=0",
            "ps.timeout_s=120"]


def job(hosts, sets: list[str], run_dir: Path, log: Path) -> dict | None:
    """One job: two servers on hosts 0 and 1, two workers on hosts 2 and 3; its summary or None."""
    servers = [hosts[i].popen([*ME, "server", "criteo_synthetic", "--shard", f"{i}/2", "--host", "0.0.0.0",
                               "--port", "7000", "--data-dir", str(hosts[i].dir), *set_args(sets)],
                              env=ENV, stdout=subprocess.PIPE, text=True) for i in range(2)]
    try:
        for s in servers:
            if not s.stdout.readline().startswith("CARDINAL_SERVER_READY"):
                print(f"    a server did not start: {sets}", flush=True)
                return None
        train = [*sets, f"ps.servers={hosts[0].address}:7000,{hosts[1].address}:7000"]
        port = 29500 + int(time.time()) % 1000
        workers = []
        for rank in range(2):
            with open(log.with_suffix(f".w{rank}.log"), "w") as out:
                workers.append(hosts[2 + rank].popen(
                    [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                     "--node-rank", str(rank), "--master-addr", hosts[2].address, "--master-port", str(port),
                     "-m", "cardinal.cli", "train", "criteo_synthetic", *set_args(train)],
                    env={**ENV, "CARDINAL_RUN_DIR": str(run_dir)}, stdout=out, stderr=out))
        codes = [w.wait(timeout=RUN_TIMEOUT_S) for w in workers]
        summary = run_dir / "summary.json"
        if codes == [0, 0] and summary.exists():
            return json.loads(summary.read_text())
        print(f"    failed ({codes}): {log.with_suffix('.w0.log').read_text(errors='replace')[-1500:]}", flush=True)
        return None
    finally:
        for s in servers:
            s.send_signal(signal.SIGKILL)
            s.wait(timeout=30)


def shape(hosts, rate: float) -> None:
    for h in hosts:
        h.shape(rate_mbit=rate) if rate else h.unshape()


def row(name: str, rate: float, s: dict | None, fp32: dict | None) -> dict:
    if s is None:
        return {"run": name, "link Mbit/s": rate or "unshaped", "samples/s": float("nan"), "pull B/sample": "-",
                "push B/sample": "-", "eval AUC": float("nan"), "logloss": float("nan"), "x fp32": "-",
                "AUC - fp32": "-"}
    n = s["samples"]
    out = {"run": name, "link Mbit/s": rate or "unshaped", "samples/s": s["samples_per_s"],
           "pull B/sample": s["bytes_received"] / n, "push B/sample": s["bytes_sent"] / n,
           "eval AUC": s["eval_auc"], "logloss": s["eval_logloss"]}
    ok = fp32 is not None
    out["x fp32"] = s["samples_per_s"] / fp32["samples_per_s"] if ok else "-"
    out["AUC - fp32"] = f"{s['eval_auc'] - fp32['eval_auc']:+.4f}" if ok else "-"
    return out


def plot(points: dict, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, by_rate in points.items():
        shaped = sorted((r, v) for r, v in by_rate.items() if r and v == v)
        line, = ax.plot([r for r, _ in shaped], [v for _, v in shaped], "o-", label=name)
        if by_rate.get(0) == by_rate.get(0) and 0 in by_rate:
            ax.axhline(by_rate[0], color=line.get_color(), linestyle="--", alpha=0.5, label=f"{name}, unshaped")
    ax.set(xscale="log", xlabel="link rate, Mbit/s (each host's sending side)", ylabel="samples/s (both workers)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="150,1000", help="link rates (Mbit/s) of the full table; 0: unshaped")
    p.add_argument("--sweep", default="50,150,400,1000,0", help="rates of the plot (fp32 and best)")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--eval-rows", type=int, default=20_000)
    p.add_argument("--quick", action="store_true", help="20,000 rows, fp32 and best at 150 Mbit/s only")
    p.add_argument("--only", default="", help="comma-separated rows to run (fp32 always runs: the ratios' base)")
    p.add_argument("--tag", default="", help="results/network_TAG.* instead of results/network.*")
    args = p.parse_args()
    why = unavailable()
    if why is not None:
        print(f"network.py needs network namespaces: {why}")
        return
    rows_n, rates = (20_000, [150.0]) if args.quick else (args.rows, [float(r) for r in args.rates.split(",")])
    sweep = [] if args.quick or not args.sweep else [float(r) for r in args.sweep.split(",")]
    with tempfile.TemporaryDirectory(prefix="cardinal-network-") as tmp:
        tmp = Path(tmp)
        sets = base_sets(rows_n, args.eval_rows, tmp / "data")
        plan, copies = tmp / "plan.json", tmp / "copies.json"
        made = [subprocess.run([*ME, "plan", "criteo_synthetic", *set_args([*sets, "ps.shards=2", *extra]), "--out",
                                str(out)], capture_output=True, text=True, timeout=600)
                for out, extra in ((plan, ['plan.layout="auto"']),
                                   (copies, ['plan.layout="auto"', "plan.replicate={C1=2000,C2=2000,C3=2000}"]))]
        for m in made:
            if m.returncode != 0:
                raise SystemExit(f"cardinal plan failed: {m.stderr[-2000:]}")
        subprocess.run([*ME, "train", "criteo_synthetic", *set_args([*sets, "train.steps=2",
                                                                      f'train.run_dir="{tmp / "warm"}"'])],
                       env=ENV, capture_output=True, timeout=600)  # the data set and numba's cache, once
        table = configs(plan, copies)
        if args.quick or args.only:
            keep = ("fp32", "best") if args.quick else ("fp32", *args.only.split(","))
            unknown = [k for k in keep if k not in table]
            if unknown:
                raise SystemExit(f"--only: no row {unknown}; the rows are {list(table)}")
            table = {k: table[k] for k in table if k in keep}
        rows, points, k = [], {"fp32": {}, "best": {}}, 0
        with Hosts(4, tmp) as hosts:
            for rate in dict.fromkeys([*rates, *sweep]):
                shape(hosts, rate)
                names = table if rate in rates else {n: table[n] for n in ("fp32", "best") if n in table}
                fp32 = None
                for name, extra in names.items():
                    k += 1
                    s = job(hosts, [*sets, *extra], tmp / f"run{k}", tmp / f"run{k}.log")
                    fp32 = s if name == "fp32" else fp32
                    print(f"  {rate or 'unshaped'} Mbit/s  {name}: "
                          + (f"{s['samples_per_s']:,.0f} samples/s, AUC {s['eval_auc']:.4f}" if s else "FAILED"),
                          flush=True)
                    if rate in rates:
                        rows.append(row(name, rate, s, fp32))
                    if name in points:
                        points[name][rate] = s["samples_per_s"] if s else float("nan")
        name = "network_quick" if args.quick else f"network_{args.tag}" if args.tag else "network"
        delay = "none: this kernel has no sch_netem" if not Path("/sys/module/sch_netem").exists() else "none"
        notes = [f"2 servers x 2 workers on 4 hosts; each host's sending side shaped by tc tbf (rate above, a 4 ms "
                 f"burst); delay: {delay}",
                 f"every run: recipe criteo_synthetic with {' '.join(sets[:-2])}; 2 servers",
                 f"cache: {CACHE}; planner + copies: plan.replicate = {{C1, C2, C3 = 2000}} (their hottest ids on both "
                 "servers); best: int8 pulls, bf16 pushes, cache s=1, the planner's plan (the recipe refuses a cache "
                 "beside copies)",
                 "samples/s: summary.json (training time of the workers: reading batches and steps; process start, "
                 "evaluation excluded); B/sample: gRPC bytes of both workers per training sample, pull = replies "
                 "received, push = requests sent",
                 "reproduce: python benchmarks/network.py " + " ".join(sys.argv[1:])]
        report.write(name, "The network as the bottleneck: 2 servers x 2 workers on shaped links", rows, notes)
        if sweep:
            plot(points, report.RESULTS / f"{name}.png", "samples/s against the link rate (fp32, best)")
            print(f"plot: {report.RESULTS / f'{name}.png'}")


if __name__ == "__main__":
    main()
