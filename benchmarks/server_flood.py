"""What a flood of large requests costs a real ``cardinal server`` process, in resident memory.

    python benchmarks/server_flood.py [--rounds 3] [--base DIR]

Each case starts one server (1 shard, the default recipe), reads its RSS from /proc, sends
``rounds`` waves of 16 concurrent pushes of the given size, samples the RSS every 10 ms while
they run (peak), then 2 s after the last wave (after). Unauthenticated pushes carry no token;
"refused" authenticated ones carry the token but name another shard, so they are read whole
and refused by the servicer. ``--base DIR`` also runs the first cases against another checkout
(e.g. ``git archive <commit> | tar -x -C DIR``) to compare with the code before the limits.
Every wait has a deadline; every server is stopped.
"""

import argparse
import concurrent.futures as cf
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
JOB, TOKEN, CALLS = "flood", "flood-token", 16


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def message(size: int) -> bytes:
    """A push-shaped message of ``size`` bytes (its header names shard 1 of 2: refused if read)."""
    head = b'{"v":1,"shard":1,"n_shards":2,"table":"emb","ids_bytes":0,"ids_dtype":"int64"}'
    return len(head).to_bytes(4, "little") + head + bytes(size - 4 - len(head))


def flood(port: int, size: int, token: bool, rounds: int, pid: int) -> tuple[float, dict]:
    metadata = (("x-cardinal-job", JOB), ("x-cardinal-token", TOKEN)) if token else ()
    body, peak, codes, stop = message(size), [rss_mb(pid)], {}, threading.Event()

    def sample():
        while not stop.wait(0.01):
            peak.append(rss_mb(pid))

    def call(_):
        opts = [("grpc.max_send_message_length", 1 << 30)]
        with grpc.insecure_channel(f"127.0.0.1:{port}", opts) as ch:
            try:
                ch.unary_unary("/cardinal.Shard/Push")(body, metadata=metadata, timeout=60)
                return "OK"
            except grpc.RpcError as e:
                return e.code().name

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        with cf.ThreadPoolExecutor(CALLS) as pool:
            for _ in range(rounds):
                for code in pool.map(call, range(CALLS), timeout=120):
                    codes[code] = codes.get(code, 0) + 1
    finally:
        stop.set()
        watcher.join(5)
    return max(peak), codes


def serve(pythonpath: Path, data_dir: str, sets: list[str]) -> tuple[subprocess.Popen, int]:
    src = pythonpath / "src"  # a checkout with the src layout, or an older flat one
    env = {**os.environ, "CARDINAL_TOKEN": TOKEN, "PYTHONPATH": str(src if src.is_dir() else pythonpath)}
    cmd = [sys.executable, "-m", "cardinal.cli", "server", "--shard", "0/1", "--data-dir", data_dir,
           "--set", f'ps.job="{JOB}"', *(x for s in sets for x in ("--set", s))]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready = [None]
    reader = threading.Thread(target=lambda: ready.__setitem__(0, proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(120)
    line = ready[0] or ""
    if "port=" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return proc, int(line.split("port=")[1].split()[0])


def case(name: str, code: Path, sets: list[str], size_mb: float, token: bool, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = serve(code, tmp, sets)
        try:
            time.sleep(1.0)
            before = rss_mb(proc.pid)
            peak, codes = flood(port, int(size_mb * (1 << 20)), token, rounds, proc.pid)
            time.sleep(2.0)
            after = rss_mb(proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    row = {"case": name, "limits": ", ".join(sets) or "defaults", "flood": f"{rounds}x{CALLS} x {size_mb:g} MiB",
           "auth": "token, refused" if token else "none", "RSS before MB": before, "peak MB": peak,
           "after MB": after, "answers": " ".join(f"{k}:{v}" for k, v in sorted(codes.items()))}
    print(row, flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", type=Path, help="another checkout to compare with (the code before the limits)")
    args = parser.parse_args()
    old = ["ps.limits.max_message_mb=64", "ps.limits.max_concurrent_calls=64"]
    rows = []
    if args.base:
        rows.append(case("before (base checkout)", args.base, [], 60, False, args.rounds))
        rows.append(case("before (base checkout)", args.base, [], 60, True, args.rounds))
    rows += [
        case("this checkout, old limits", ROOT, old, 60, False, args.rounds),
        case("this checkout, old limits", ROOT, old, 60, True, args.rounds),
        case("this checkout", ROOT, [], 60, False, args.rounds),
        case("this checkout", ROOT, [], 15.9, False, args.rounds),
        case("this checkout", ROOT, [], 15.9, True, args.rounds),
    ]
    write("server_flood", "Server RSS under a flood of 16 concurrent large pushes", rows, [
        "one `cardinal server` process per row, default recipe; RSS from /proc/PID/status (VmRSS)",
        "peak: sampled every 10 ms during the flood; after: 2 s after the last wave",
        "unauthenticated calls are refused from their metadata before the handler reads the message (methods "
        "registered as client-streaming); an A/B of that alone (64 MiB x 64 limits, 3x16 x 60 MiB, 2 runs each) gave "
        "peaks of +23/+30 MB against +42/+83 MB for unary handlers: gRPC's own buffering dominates",
        "refused-with-token calls are read whole, then refused (wrong shard): the cost max_message_mb x "
        "max_concurrent_calls bounds",
        "reproduce: python benchmarks/server_flood.py [--base DIR with `git archive 5a12bd3 | tar -x -C DIR`]",
    ])


if __name__ == "__main__":
    main()
