"""`cardinal serve` against hostile clients (issue 25, items 7 and 8): a real server process with its
default limits on 127.0.0.1, spoken to over raw sockets.

    python benchmarks/serve_edge.py [--name serve_edge] [--note "what code ran"]

1. Bodies of empty examples: the audit's 15.6 MB (past max_body_mb) and 3.9 MB (under it, 1M
   examples): the answer, its time and the growth of the server's peak RSS (VmHWM).
2. /healthz answered every 10 ms for 3 s, alone and beside four clients sending 4,096-example
   bodies (3.4 MB, every field at its widest) back to back: median, p90 and max.
3. 300 connections that sent half a request head: how many the server still holds after 12 s.
4. 300 requests with a malformed header, one a connection: bytes the server wrote to its log.
Writes results/<name>.{md,json}.
"""

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from helpers.raw_http import ask, closed  # noqa: E402
from report import write  # noqa: E402

from cardinal import cli  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.serve.requests import COLUMNS  # noqa: E402
from cardinal.train import Trainer  # noqa: E402

WIDEST = {c: -99999999999999999 if c[0] == "I" else "ffffffff" for c in COLUMNS}


def export(tmp: Path) -> Path:
    recipe = load(None, [f'data.cache_dir="{tmp / "data"}"', "data.synthetic.rows=3000",
                         "data.synthetic.eval_rows=1000", "data.batch_size=256", "train.steps=4",
                         "checkpoint.every=4", 'eval.early_stop="none"'])
    trainer = Trainer(recipe, tmp / "run", progress=False)
    trainer.fit()
    trainer.close()
    assert cli.main(["export", str(tmp / "run"), "--out", str(tmp / "x")]) == 0
    return tmp / "x"


def peak_kb(pid: int) -> int:
    return int(next(x for x in open(f"/proc/{pid}/status") if x.startswith("VmHWM:")).split()[1])


def latencies(port: int, seconds: float) -> dict:
    waits, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        ask(port, "GET", "/healthz")
        waits.append(time.perf_counter() - start)
        time.sleep(0.01)
    waits.sort()
    return {"median ms": waits[len(waits) // 2] * 1e3, "p90 ms": waits[int(len(waits) * 0.9)] * 1e3,
            "max ms": waits[-1] * 1e3}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--name", default="serve_edge")
    p.add_argument("--note", default="", help="a line for the results, e.g. which source tree ran")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        x = export(Path(tmp))
        log = Path(tmp) / "serve.stderr"
        with open(log, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "cardinal.cli", "serve", str(x), "--port", "0"],
                                    stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            port = int(proc.stdout.readline().split("127.0.0.1:")[1].split()[0])
            ask(port, "POST", "/predict", json.dumps({"examples": [WIDEST]}).encode())
            for n in (3_900_000, 1_000_000):
                body = b'{"examples": [' + b", ".join([b"{}"] * n) + b"]}"
                before, start = peak_kb(proc.pid), time.perf_counter()
                status, _ = ask(port, "POST", "/predict", body)
                rows.append({"case": f"{len(body) / 1e6:.1f} MB of {{}}", "answer": status,
                             "ms": (time.perf_counter() - start) * 1e3,
                             "peak RSS +MB": (peak_kb(proc.pid) - before) / 1024})
            big = json.dumps({"examples": [WIDEST] * 4096}).encode()
            ask(port, "POST", "/predict", big)
            rows.append({"case": "/healthz alone", **latencies(port, 3)})
            stop = threading.Event()

            def send():
                while not stop.is_set():
                    ask(port, "POST", "/predict", big)

            senders = [threading.Thread(target=send) for _ in range(4)]
            for t in senders:
                t.start()
            time.sleep(0.5)
            rows.append({"case": "/healthz beside 4 x 3.4 MB", **latencies(port, 3)})
            stop.set()
            for t in senders:
                t.join()
            half = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(300)]
            for s in half:
                s.sendall(b"POST /predict HTTP/1.1\r\nHost: t\r\nContent-Len")
            time.sleep(12)
            rows.append({"case": "300 half-sent heads", "held after 12 s": sum(not closed(s) for s in half)})
            for s in half:
                s.close()
            before = log.stat().st_size
            for _ in range(300):
                with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n")
                    while s.recv(1 << 16):
                        pass
            time.sleep(0.5)
            rows.append({"case": "300 malformed requests", "log bytes": log.stat().st_size - before})
        finally:
            proc.kill()
            proc.wait()
    columns = ["case", "answer", "ms", "peak RSS +MB", "median ms", "p90 ms", "max ms", "held after 12 s", "log bytes"]
    rows = [{c: r.get(c, "") for c in columns} for r in rows]
    write(args.name, "cardinal serve against hostile clients (default limits)", rows,
          ["a real `cardinal serve` process on 127.0.0.1 and raw sockets, on the same 2 shared cores; peak RSS is "
           "the process's high-water mark, so the second body's growth is only what passes the first's",
           *([args.note] if args.note else []), f"reproduce: python benchmarks/serve_edge.py --name {args.name}"])


if __name__ == "__main__":
    main()
