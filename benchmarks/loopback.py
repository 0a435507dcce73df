"""Pull and push through one parameter server over loopback, against the in-process transport.

    python benchmarks/loopback.py [--quick]

One ``cardinal server`` process (1 shard) and, side by side, one in-process store, hold the
same table; the same batches of unique ids (65,536 per request, Zipf 1.1 over 4M ids) are
pulled and pushed (row-wise Adagrad) through each. MB/s counts the arrays moved (8-byte ids,
4-byte values), not protocol overhead.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.embedding import unique_inverse  # noqa: E402
from cardinal.ps import PSClient, embedded  # noqa: E402
from cardinal.ps.server import READY  # noqa: E402
from cardinal.ps.transport.grpc_transport import GrpcTransport  # noqa: E402
from cardinal.train import config, tables  # noqa: E402

BATCH = 65_536


def batches(n, rng):
    ranks = rng.zipf(1.1, n * BATCH * 2)
    ranks = ranks[ranks <= 1 << 22][: n * BATCH]
    ids = (ranks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
    return [unique_inverse(ids[i * BATCH:(i + 1) * BATCH])[0] for i in range(n)]


def timed(fn, items):
    start = time.perf_counter()
    for x in items:
        fn(x)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 5 if args.quick else 30
    rows = []
    for dim in (16, 64):
        sets = ['model.name="dlrm"', f"embedding.dim={dim}", 'sparse_optimizer.name="rowwise_adagrad"']
        recipe = config.load(None, sets)
        ids = batches(n, np.random.default_rng(dim))
        grads = [np.full((len(b), dim), 1e-3, np.float32) for b in ids]
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "CARDINAL_TOKEN": "bench"}
            cmd = [sys.executable, "-m", "cardinal.cli", "server", "--shard", "0/1", "--data-dir", tmp,
                   *sum((["--set", s] for s in sets), [])]
            server = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
            try:
                line = server.stdout.readline()
                assert line.startswith(READY), line
                port = dict(p.split("=", 1) for p in line.split()[1:])["port"]
                transport = GrpcTransport([f"127.0.0.1:{port}"], "cardinal", "bench", timeout=120)
                remote = PSClient(transport)
                local = embedded(tables.store_config(recipe), 1)
                for client in (remote, local):  # create every row first: the figures are for existing rows
                    for b in ids:
                        client.pull("emb", b).wait()
                moved = sum(len(b) for b in ids)
                for op, fn in (("pull", lambda c: lambda b: c.pull("emb", b).wait()),):
                    t_remote, t_local = timed(fn(remote), ids), timed(fn(local), ids)
                    rows.append(_row(op, dim, moved, 8 + 4 * dim, t_remote, t_local))
                it = {}
                push = lambda c: lambda b: c.push("emb", b, grads[it.setdefault(id(c), iter(range(n))).__next__()]).wait()
                t_remote = timed(push(remote), ids)
                t_local = timed(push(local), ids)
                rows.append(_row("push", dim, moved, 8 + 4 * dim, t_remote, t_local))
                transport.close()
            finally:
                server.terminate()
                server.wait(30)
    write("loopback" + ("_quick" if args.quick else ""), "One server over loopback gRPC vs the in-process transport",
          rows, [f"{n} requests of {BATCH:,} Zipf(1.1) draws de-duplicated, to one shard; rows exist already",
                 "server: a separate `cardinal server` process; client: PSClient over GrpcTransport",
                 "reproduce: python benchmarks/loopback.py"])


def _row(op, dim, moved, bytes_per_row, t_remote, t_local):
    return {"op": op, "dim": dim, "rows": moved, "loopback Mrows/s": moved / t_remote / 1e6,
            "loopback MB/s": moved * bytes_per_row / t_remote / 1e6, "in-process Mrows/s": moved / t_local / 1e6,
            "loopback / in-process": t_local / t_remote}


if __name__ == "__main__":
    main()
