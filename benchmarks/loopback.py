"""Pull and push through one parameter server over loopback, against the in-process transport.

    python benchmarks/loopback.py [--quick] [--repeats R] [--rows-in-replies]

One ``cardinal server`` process (1 shard) and, side by side, one in-process store, hold the
same table; the same batches of unique ids (65,536 draws per request, Zipf 1.1 over 4M ids,
de-duplicated) are pulled and pushed (row-wise Adagrad) through each. Rows with a codec
(``wire.pull`` / ``wire.push``: fp32, bf16, int8) move that many fewer bytes; a pull's rows come
through shared memory, as on any one host (``--rows-in-replies``: in the replies, as from another
host: ``ps/transport/shared_rows.py``); every ratio is
loopback / in-process **fp32** in the same run (the in-process transport applies the codec's
round trip too, so its time with a codec is shown beside it). Each figure is the median of
``--repeats`` passes, loopback and in-process interleaved (the machine may be shared).
MB/s counts the arrays moved at the codec's size (8-byte ids, encoded rows), not protocol overhead.
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

from cardinal import codecs  # noqa: E402
from cardinal.embedding import unique_inverse  # noqa: E402
from cardinal.ps import PSClient, connect  # noqa: E402
from cardinal.ps.server.process import READY  # noqa: E402
from cardinal.recipe import load  # noqa: E402
from cardinal.train import tables  # noqa: E402

BATCH = 65_536
CASES = {16: ("fp32",), 64: ("fp32", "bf16", "int8")}  # dim: codecs (each both ways)


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


def medians(clients: dict, op, items, repeats: int) -> dict:
    """Median seconds of a pass over ``items`` per client, the clients taking turns each repeat."""
    times = {name: [] for name in clients}
    for _ in range(repeats):
        for name, client in clients.items():
            times[name].append(timed(op(client), items))
    return {name: float(np.median(t)) for name, t in times.items()}


def server(tmp, sets):
    env = {**os.environ, "CARDINAL_TOKEN": "bench"}
    cmd = [sys.executable, "-m", "cardinal.cli", "server", "--shard", "0/1", "--data-dir", tmp,
           *sum((["--set", s] for s in sets), [])]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith(READY), line
    return proc, dict(p.split("=", 1) for p in line.split()[1:])["port"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=0, help="passes per figure (default 5, --quick 3)")
    parser.add_argument("--rows-in-replies", action="store_true",
                        help="pulls' rows in the gRPC replies, not through shared memory (as from another host)")
    args = parser.parse_args()
    n, repeats = (5, args.repeats or 3) if args.quick else (20, args.repeats or 5)
    rows = []
    for dim, names in CASES.items():
        sets = ['model.name="dlrm"', f"embedding.dim={dim}", 'sparse_optimizer.name="rowwise_adagrad"']
        recipe = load(None, sets)
        ids = batches(n, np.random.default_rng(dim))
        grads = {id(b): np.full((len(b), dim), 1e-3, np.float32) for b in ids}
        with tempfile.TemporaryDirectory() as tmp:
            proc, port = server(tmp, sets)
            try:
                local = connect(tables.store_config(recipe), 1)
                clients = {"in-process fp32": local}
                for name in names:
                    clients[f"loopback {name}"] = connect(servers=[f"127.0.0.1:{port}"], job="cardinal", token="bench",
                                                          timeout=120, pull_codec=name, push_codec=name,
                                                          shared_memory=not args.rows_in_replies)
                    if name != "fp32":
                        clients[f"in-process {name}"] = PSClient(local.transport, pull_codec=name, push_codec=name)
                for b in ids:  # create every row first: the figures are for existing rows
                    local.pull("emb", b).wait()
                    clients["loopback fp32"].pull("emb", b).wait()
                moved = sum(len(b) for b in ids)
                ops = {"pull": lambda c: lambda b: c.pull("emb", b).wait(),
                       "push": lambda c: lambda b: c.push("emb", b, grads[id(b)]).wait()}
                for op, fn in ops.items():
                    t = medians(clients, fn, ids, repeats)
                    for name in names:
                        rows.append(_row(op, dim, name, moved, 8 + codecs.get(name).row_bytes(dim),
                                         t[f"loopback {name}"], t["in-process fp32"], t[f"in-process {name}"]))
                for name in names:
                    clients[f"loopback {name}"].transport.close()
            finally:
                proc.terminate()
                proc.wait(30)
    write("loopback" + ("_replies" if args.rows_in_replies else "") + ("_quick" if args.quick else ""),
          "One server over loopback gRPC vs the in-process transport",
          rows, [f"{n} requests of {BATCH:,} Zipf(1.1) draws de-duplicated, to one shard; rows exist already",
                 f"median of {repeats} passes per figure, loopback and in-process taking turns",
                 "server: a separate `cardinal server` process; client: PSClient over GrpcTransport",
                 "pulls' rows " + ("in the gRPC replies (--rows-in-replies)" if args.rows_in_replies else
                                   "through shared memory (one host: ps/transport/shared_rows.py)"),
                 "ratio: in-process fp32 time / loopback time (the codec on the loopback side only)",
                 "reproduce: python benchmarks/loopback.py"])


def _row(op, dim, codec, moved, bytes_per_row, t_remote, t_local, t_local_codec):
    return {"op": op, "dim": dim, "codec": codec, "rows": moved, "loopback Mrows/s": moved / t_remote / 1e6,
            "loopback MB/s": moved * bytes_per_row / t_remote / 1e6, "in-process Mrows/s": moved / t_local / 1e6,
            "in-process with codec Mrows/s": moved / t_local_codec / 1e6, "loopback / in-process": t_local / t_remote}


if __name__ == "__main__":
    main()
