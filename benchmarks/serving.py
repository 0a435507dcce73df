"""Serving: latency at a steady request rate, throughput with batched requests, and reloads of
training's delta checkpoints under load. A real HTTP client (aiohttp) against `cardinal serve` in
its own process on 127.0.0.1.

    python benchmarks/serving.py [--steps 300] [--seconds 20] [--reloads 20] [--runs 5]

1. Trains the default recipe (DeepFM, dim 16) for --steps steps of 4,096 with a checkpoint every
   --every steps (the first full, the rest deltas), and exports its first checkpoint (fp32).
2. Steady: single-example requests sent open-loop at --rate per second for --seconds; latency
   from each request's scheduled send (so a stall counts against every request it delays).
3. Batched: --concurrency clients each sending requests of --batch examples back to back.
4. Reloads: the server follows a run directory into which the checkpoints after the first appear
   one at a time (renamed into place, as a committed checkpoint appears), --reloads of them, every
   --reload-every seconds, while single-example requests go on at --rate; failed requests, p99
   against step 2's, and the server's RSS after each reload.
Steps 2 and 4 are repeated --runs times, each with a fresh server from the export following the
same checkpoints (a reload's p99 varies from run to run; the target holds in every one).
Writes results/serving.{md,json}.
"""

import argparse
import asyncio
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.checkpoint import layout  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402


def train(tmp: Path, steps: int, every: int) -> Path:
    recipe = load("criteo_synthetic", [f"train.steps={steps}", f"checkpoint.every={every}",
                                       "checkpoint.full_every=1000", "checkpoint.keep=1000",
                                       'eval.early_stop="none"', "eval.every=0",
                                       'train.baseline="none"'])
    trainer = Trainer(recipe, tmp / "run", progress=True)
    trainer.fit()
    trainer.close()
    return tmp / "run"


def start(export: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "cardinal.cli", "serve", str(export), "--port", "0", *extra],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "serving on" not in line:
        proc.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    port = int(line.split("127.0.0.1:")[1].split()[0])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # ready: following a run, once its reload path is warm
        try:
            with aiohttp_get(port, "/readyz"):
                return proc, port
        except OSError:  # 503 until then
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server never became ready")


def rss(pid: int) -> int:
    """The server's resident bytes, with its child's that reads reloads (``serve/follow_process.py``)."""
    pids = [pid] + [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat") if _ppid(p) == pid]
    return sum(int(Path(f"/proc/{p}/statm").read_text().split()[1]) * 4096 for p in pids)


def _ppid(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):  # a process gone meanwhile
        return None


async def steady(url: str, lines: list[str], rate: float, seconds: float, during=None) -> dict:
    """Open-loop single-example requests; latency measured from each one's scheduled time."""
    latencies, failed, steps = [], 0, set()
    n = int(rate * seconds)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def one(i: int, at: float):
            nonlocal failed
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            try:
                async with session.post(url, json={"rows": [lines[i % len(lines)]]}) as r:
                    body = await r.json()
                    if r.status != 200:
                        failed += 1
                    else:
                        steps.add(body["step"])
            except aiohttp.ClientError:
                failed += 1
            latencies.append(time.perf_counter() - at)

        t0 = time.perf_counter() + 0.2
        side = asyncio.get_running_loop().run_in_executor(None, during, t0) if during else None
        await asyncio.gather(*(one(i, t0 + i / rate) for i in range(n)))
        side_result = await side if side else None
    lat = np.array(latencies) * 1000
    return {"requests": n, "failed": failed, "p50 ms": float(np.percentile(lat, 50)),
            "p99 ms": float(np.percentile(lat, 99)), "max ms": float(lat.max()), "steps": sorted(steps),
            "side": side_result}


async def batched(url: str, lines: list[str], batch: int, concurrency: int, seconds: float) -> dict:
    done, failed = 0, 0
    end = time.perf_counter() + seconds
    async with aiohttp.ClientSession() as session:
        async def client(k: int):
            nonlocal done, failed
            i = k * batch
            while time.perf_counter() < end:
                rows = [lines[(i + j) % len(lines)] for j in range(batch)]
                i += batch * concurrency
                async with session.post(url, json={"rows": rows}) as r:
                    await r.read()
                    if r.status == 200:
                        done += batch
                    else:
                        failed += 1
        start_time = time.perf_counter()
        await asyncio.gather(*(client(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - start_time
    return {"predictions/s": done / elapsed, "failed": failed}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--reloads", type=int, default=20)
    p.add_argument("--reload-every", type=float, default=1.5)
    p.add_argument("--runs", type=int, default=5, help="fresh servers, each through the same reloads")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="cardinal-serving-") as tmp:
        tmp = Path(tmp)
        run = train(tmp, args.steps, args.every)
        steps = layout.committed_steps(run / "checkpoints")
        if len(steps) < args.reloads + 1:
            raise SystemExit(f"only {len(steps)} checkpoints: raise --steps or lower --every")
        first = steps[-(args.reloads + 1)]
        subprocess.run([sys.executable, "-m", "cardinal.cli", "export", str(run), "--out", str(tmp / "x"),
                        "--checkpoint", str(layout.step_dir(run / "checkpoints", first))], check=True)
        manifest = json.loads((tmp / "x" / "manifest.json").read_text())
        lines = [ln.split("\t", 1)[1] for ln in next(Path(load().data.cache_dir).glob("synthetic-*/eval.tsv"))
                 .read_text().splitlines()[:20000]]
        # the followed run: recipe and every checkpoint up to the first; the later ones wait aside
        followed, aside = tmp / "followed", tmp / "aside"
        (followed / "checkpoints").mkdir(parents=True)
        aside.mkdir()
        shutil.copy(run / "recipe.json", followed)
        for s in steps:
            src = layout.step_dir(run / "checkpoints", s)
            shutil.move(str(src), str((followed / "checkpoints" if s <= first else aside) / src.name))
        later = [s for s in steps if s > first][: args.reloads]
        gc.collect()
        gc.freeze()  # the client's own collector passes (torch is loaded here) are not the server's latency
        runs = []
        for k in range(args.runs):  # each a fresh server, from the export, through the same checkpoints
            runs.append(one_run(args, tmp / "x", followed, aside, later, lines, batched_too=k == 0))
            for s in later:  # back aside for the next run
                name = layout.step_dir(aside, s).name
                shutil.move(str(followed / "checkpoints" / name), str(aside / name))
            r = runs[-1]
            print(f"run {k + 1}: steady p99 {r['quiet']['p99 ms']:.2f} ms, reloads p99 {r['reloading']['p99 ms']:.2f} "
                  f"ms ({r['reloading']['p99 ms'] / r['quiet']['p99 ms']:.2f}x)", flush=True)
    report(args, manifest, later, runs)


def one_run(args, export: Path, followed: Path, aside: Path, later: list[int], lines: list[str],
            batched_too: bool) -> dict:
    """A server from ``export`` following ``followed``: steady requests, batched ones (``batched_too``),
    then the checkpoints ``later`` published one at a time under steady requests."""
    proc, port = start(export, "--follow", str(followed), "--poll", "0.2")
    url = f"http://127.0.0.1:{port}/predict"
    try:
        asyncio.run(steady(url, lines, args.rate, 3))  # warm up
        quiet_rss = rss(proc.pid)
        quiet = asyncio.run(steady(url, lines, args.rate, args.seconds))
        quiet_growth = (rss(proc.pid) - quiet_rss) / quiet_rss * 100  # requests alone, no reload
        throughput = asyncio.run(batched(url, lines, args.batch, args.concurrency, args.seconds)) if batched_too else None
        base_rss, base_tables = rss(proc.pid), table_bytes(port)

        def publish(t0: float) -> list[int]:
            sizes = []
            for k, s in enumerate(later):
                time.sleep(max(0.0, t0 + (k + 0.5) * args.reload_every - time.perf_counter()))
                name = layout.step_dir(aside, s).name
                shutil.move(str(aside / name), str(followed / "checkpoints" / name))  # appears committed
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    with aiohttp_get(port, "/readyz") as r:
                        if json.loads(r)["step"] == s:
                            break
                    time.sleep(0.02)
                sizes.append((rss(proc.pid), table_bytes(port)))
            return sizes

        reload_seconds = args.reload_every * (len(later) + 1)
        reloading = asyncio.run(steady(url, lines, args.rate, reload_seconds, during=publish))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"quiet": quiet, "quiet_growth": quiet_growth, "throughput": throughput, "base_rss": base_rss,
            "base_tables": base_tables, "reloading": reloading, "sizes": reloading.pop("side")}


def report(args, manifest: dict, later: list[int], runs: list[dict]) -> None:
    first = runs[0]
    quiet, throughput, reloading = first["quiet"], first["throughput"], first["reloading"]
    sizes, base_rss, base_tables = first["sizes"], first["base_rss"], first["base_tables"]
    # the tables grow as training meets new ids: what a reload adds beyond that is the overhead
    overhead = [r - t for r, t in sizes]
    growth = [(b - a) / base_rss * 100 for a, b in zip([base_rss - base_tables] + overhead[:-1], overhead)]
    rss_after, tables_after = sizes[-1]
    rows = [{"phase": f"steady, 1 example a request, {args.rate:.0f}/s", "requests": quiet["requests"],
             "failed": quiet["failed"], "p50 ms": quiet["p50 ms"], "p99 ms": quiet["p99 ms"], "max ms": quiet["max ms"],
             "predictions/s": args.rate, "p99 / steady": ""},
            {"phase": f"batched, {args.batch} examples a request, {args.concurrency} clients", "requests": "",
             "failed": throughput["failed"], "p50 ms": "", "p99 ms": "", "max ms": "",
             "predictions/s": throughput["predictions/s"], "p99 / steady": ""}]
    for k, r in enumerate(runs):
        q, re = r["quiet"], r["reloading"]
        if k:
            rows.append({"phase": f"run {k + 1}: steady", "requests": q["requests"], "failed": q["failed"],
                         "p50 ms": q["p50 ms"], "p99 ms": q["p99 ms"], "max ms": q["max ms"],
                         "predictions/s": args.rate, "p99 / steady": ""})
        rows.append({"phase": f"{'run %d: ' % (k + 1) if len(runs) > 1 else ''}{len(later)} reloads under "
                              f"{args.rate:.0f}/s", "requests": re["requests"], "failed": re["failed"],
                     "p50 ms": re["p50 ms"], "p99 ms": re["p99 ms"], "max ms": re["max ms"],
                     "predictions/s": args.rate, "p99 / steady": re["p99 ms"] / q["p99 ms"]})
    ratios = [r["reloading"]["p99 ms"] / r["quiet"]["p99 ms"] for r in runs]
    notes = [f"model: the default recipe (DeepFM, dim 16), {manifest['tables']['emb']['rows']:,} rows served (fp32), "
             f"trained {args.steps} steps; a checkpoint every {args.every} steps, deltas after the first",
             f"{len(runs)} run(s), each a fresh server from the export following the same {len(later)} checkpoints "
             f"(steady, then reloads); p99 during reloads / that run's steady p99: "
             + ", ".join(f"{x:.2f}x" for x in ratios) + f" (worst {max(ratios):.2f}x)",
             f"reloads (run 1): steps served {reloading['steps'][0]}..{reloading['steps'][-1]}; server RSS (with "
             f"its child that reads reloads) "
             f"{base_rss / 2**20:.0f} MiB before, {rss_after / 2**20:.0f} MiB after {len(sizes)}, of which the served "
             f"tables {base_tables / 2**20:.1f} and {tables_after / 2**20:.1f} MiB (training met new ids; a table's "
             f"recent deltas lie beside it until a reload folds them in, serve/overlay.py); the rest's growth per "
             f"reload (of the RSS before): max {max(growth):+.2f}%, mean {np.mean(growth):+.2f}%, over all "
             f"{(overhead[-1] - base_rss + base_tables) / base_rss * 100:+.2f}% (the steady phase's "
             f"{args.seconds:g} s of requests alone, no reload: {first['quiet_growth']:+.2f}%)",
             "latency: from each request's scheduled send time to its answer (open loop: a stall delays every request "
             "behind it); the client runs on the same 2 cores as the server",
             f"reproduce: python benchmarks/serving.py --steps {args.steps} --every {args.every} --seconds "
             f"{args.seconds:g} --reloads {args.reloads} --runs {args.runs}"]
    write("serving", "Serving: cardinal serve over HTTP on 127.0.0.1", rows, notes,
          {"rss_and_table_bytes_after_reloads": sizes, "overhead_growth_percent": growth, "base_rss": base_rss,
           "base_table_bytes": base_tables, "p99_ratios": ratios})


def table_bytes(port: int) -> int:
    """The served tables' bytes, from the server's metrics."""
    with aiohttp_get(port, "/metrics") as text:
        for line in text.decode().splitlines():
            if line.startswith("cardinal_serve_table_bytes "):
                return int(float(line.split()[1]))
    raise RuntimeError("no cardinal_serve_table_bytes in /metrics")


class aiohttp_get:
    """A blocking GET (the publishing thread's), as a context manager giving the body."""

    def __init__(self, port: int, path: str):
        import urllib.request
        self.r = urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)

    def __enter__(self):
        return self.r.read()

    def __exit__(self, *exc):
        self.r.close()


if __name__ == "__main__":
    main()
