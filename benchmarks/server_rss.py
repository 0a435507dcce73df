"""How much memory a real ``cardinal server`` process holds against its ``ps.memory.budget``.

    python benchmarks/server_rss.py [--budgets-mib 64,256,1024] [--steps 40] [--quick]

Each case is a job as a user runs it: ``cardinal launch --servers 1 --workers 1`` on generated
data whose ids outgrow the budget, training then saving at the end, with and without the disk
tier (``ps.memory.disk_budget``). The server's resident memory (VmRSS from /proc/PID/status) is sampled
every 0.5 s from its start to its exit, and its accounted bytes (the ``cardinal_ps_bytes`` gauges
of its metrics endpoint) with it. The floor is the RSS of the idle server (the first sample taken
once it listens, before any row); the target is peak RSS <= 1.1 x budget + the documented floor
(``cardinal.ps.server.process_memory.FLOOR``). Every run has a deadline and leaves no process behind.
"""

import argparse
import math
import re
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from jobs import launch  # noqa: E402
from report import write  # noqa: E402

from cardinal.ps.server.process_memory import FLOOR  # noqa: E402

MIB = 1 << 20


def server_pid(data_dir: str) -> int | None:
    """The ``cardinal server`` process whose command line names a data directory under ``data_dir``."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"server" in cmd and any(a.decode(errors="replace").startswith(data_dir) for a in cmd):
                return int(proc.name)
    return None


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def profile(pid: int) -> dict[str, int]:
    """Resident bytes by kind of mapping (/proc/PID/smaps): code and data of files (the libraries),
    the main heap, and anonymous maps (the tables' arenas, glibc's thread arenas, large arrays)."""
    kinds, kind = {"files": 0, "heap": 0, "anon": 0}, "anon"
    try:
        for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
                name = head[5] if len(head) > 5 else ""
                kind = "heap" if name == "[heap]" else "files" if name.startswith("/") else "anon"
            elif head and head[0] == "Rss:":
                kinds[kind] += int(head[1]) * 1024
    except OSError:
        pass
    return kinds


def accounted(port: int) -> int | None:
    """The server's accounted bytes: the sum of its ``cardinal_ps_bytes`` gauges."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    return int(sum(float(v) for v in re.findall(r"^cardinal_ps_bytes\{[^}]*\} (\S+)$", text, re.M)))


class Sampler(threading.Thread):
    """Every 0.5 s: the server's RSS and accounted bytes, until ``stop``."""

    def __init__(self, root: Path, log: Path, trace: bool = False):
        super().__init__(daemon=True)
        self.trace = trace
        self.root, self.log, self.stop = str(root), log, threading.Event()
        self.rss: list[int] = []
        self.at_peak: dict[str, int] = {}
        self.bytes: list[int] = []

    def run(self) -> None:
        pid = port = None
        while not self.stop.wait(0.5):
            pid = pid or server_pid(self.root)
            if pid is None:
                continue
            if port is None and self.log.exists():
                found = re.search(r"CARDINAL_SERVER_READY .*metrics=(\d+)", self.log.read_text(errors="replace"))
                port = int(found.group(1)) if found else None
                if port is None:
                    continue  # not listening yet: the floor is the first sample once it listens
            rss = rss_bytes(pid)
            if rss is None:
                if self.rss:
                    return  # it exited
                continue
            if rss > max(self.rss, default=0):
                self.at_peak = profile(pid)
            self.rss.append(rss)
            value = accounted(port)
            if value is not None:
                self.bytes.append(value)
            if self.trace:
                print(f"  {len(self.rss) / 2:6.1f} s  RSS {rss / 1e6:7.1f} MB  accounted {(value or 0) / 1e6:7.1f} MB",
                      flush=True)


def batch_for(budget: int, largest: int) -> int:
    """A batch whose new rows of the last few steps (protected from eviction: the server refuses a
    step whose protected rows alone would pass the budget) take at most a third of the budget: a
    batch row brings about 5 KB of new rows (26 fields at dim 64), protected for 3 steps."""
    return max(64, min(largest, 1 << int(math.log2(budget / 45_000))))


def case(budget_mib: int, disk: bool, args, base: Path) -> dict:
    root = base / f"b{budget_mib}-{'disk' if disk else 'ram'}"
    batch = batch_for(budget_mib * MIB, args.batch)
    sets = [f'data.cache_dir="{base / "data"}"', f"data.synthetic.rows={args.rows or args.steps * batch}",
            "data.synthetic.eval_rows=2000",
            f"data.synthetic.vocab={args.vocab}", "data.synthetic.skew=1.01", f"data.batch_size={batch}",
            f"embedding.dim={args.dim}", "model.hidden=[16]", f"train.steps={args.steps}", "metrics.log_every=10",
            "ps.metrics_port=0", f"ps.memory.budget={budget_mib * MIB}",
            f'ps.memory.disk_dir="{root / "tiers"}"',
            *([f"ps.memory.disk_budget={8 * budget_mib * MIB}"] if disk else [])]
    sampler = Sampler(root, root.with_suffix(".log"), args.trace)
    sampler.start()
    t0 = time.perf_counter()
    run = launch(1, 1, sets, root, args.timeout)
    sampler.stop.set()
    sampler.join(5)
    if run.code != 0 or not sampler.rss:
        raise SystemExit(f"budget {budget_mib} MiB, disk {disk}: exit {run.code}\n{run.tail()}")
    floor, peak, budget = sampler.rss[0], max(sampler.rss), budget_mib * MIB
    return {"budget MiB": budget_mib, "disk tier": "yes" if disk else "no", "batch": batch,
            "idle RSS MB": round(floor / 1e6, 1), "peak RSS MB": round(peak / 1e6, 1),
            "peak accounted / budget": round(max(sampler.bytes, default=0) / budget, 3),
            **{f"at peak: {k} MB": round(v / 1e6, 1) for k, v in sampler.at_peak.items()},
            "bound MB": round((1.1 * budget + FLOOR) / 1e6, 1), "peak / bound": round(peak / (1.1 * budget + FLOOR), 3),
            "samples": len(sampler.rss), "s": round(time.perf_counter() - t0, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budgets-mib", default="64,256,1024")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=4096, help="the largest batch (smaller budgets take smaller ones)")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--rows", type=int, default=0, help="generated rows (0: steps x each case's batch)")
    p.add_argument("--vocab", type=int, default=50_000_000)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--trace", action="store_true", help="print every sample")
    p.add_argument("--disk", default="no,yes", help="cases without (no) and with (yes) the disk tier")
    p.add_argument("--base", help="where runs and data go (default: a temporary directory, removed after)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="server-rss-", dir=args.base) as tmp:
        rows = [case(int(b), disk, args, Path(tmp)) for b in args.budgets_mib.split(",") for disk in
                [d == "yes" for d in args.disk.split(",")]]
    write("server_rss", "A server process's resident memory against its ps.memory.budget", rows, [
        f"cardinal launch --servers 1 --workers 1, {args.steps} steps of batch rows (at most {args.batch}, so that "
        "the rows of the steps protected from eviction take at most a third of the budget), embedding.dim "
        f"{args.dim}, "
        f"generated data (vocab {args.vocab:,}, skew 1.01: ids outgrow every budget), a full checkpoint at the end",
        "RSS: VmRSS of the server process every 0.5 s from the moment it listens to its exit; idle: the first sample",
        f"bound: 1.1 x budget + the documented floor ({FLOOR / 1e6:.0f} MB, cardinal/ps/server/process_memory.py)",
        "accounted: the server's cardinal_ps_bytes gauges (rows, index, filters) against the budget",
        "at peak: the peak's resident bytes by mapping (/proc/PID/smaps): files (libraries' code and data), the main "
        "heap, anonymous maps (the tables' arenas, glibc's thread arenas, large arrays)",
        "disk tier: ps.memory.disk_budget = 8 x budget", "reproduce: python benchmarks/server_rss.py"])


if __name__ == "__main__":
    main()
