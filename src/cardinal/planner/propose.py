"""The planner: a sharding plan that balances the servers with the fewest requests a step.

Each server's load is counted three ways (``loads``): the bytes its rows take, the ids a
step pulls from it (and pushes back), and the requests a step sends it: one pull and one push
for each piece of a table it holds. The hash plan balances bytes and ids but sends every
table to every server, S x T requests a step; a request's fixed cost (a gRPC round trip,
a lock, a kernel call) is what a step on many small tables spends most of.

``propose`` places each table whole on one server where it can (table-wise), the largest
first, each on the server it leaves least loaded (by the larger of its byte and id shares,
LPT scheduling in two dimensions); a table too large to place whole without tipping the
balance is spread row-wise over as few of the least loaded servers as keep each share small.
It tries spreading fewer tables first and keeps
the first plan whose busiest server is within ``tolerance`` of the mean by bytes and by ids
and whose servers each fit ``budget`` bytes. Spreading every table is the hash plan, which
balances as well as hashing does: the fallback.

The planner does not split tables by columns: in this cost model a column split moves the same
bytes as a row split over as many servers, but asks each of them for every id. Column pieces
are for plans written by hand (``sharding/plan.py``), e.g. to keep each server's piece of a very wide
row small.
"""

import math
import re

import numpy as np

from cardinal.planner.stats import TableStats
from cardinal.sharding.plan import Piece, ShardingPlan

# a table spreads past this share of a server's mean load; first none (inf): a table up to ``tolerance``
# times the mean may stay whole
SPREAD_AT = (math.inf, 1.0, 0.6, 0.45, 0.3, 0.2, 0.1, 0.05, 0.0)


def loads(plan: ShardingPlan, stats: list[TableStats]) -> dict[str, np.ndarray]:
    """Per server: "bytes" its rows take, "ids" a step asks of it, "requests" a step sends it."""
    n = plan.n_shards
    out = {k: np.zeros(n) for k in ("bytes", "ids", "requests")}
    for t in stats:
        for p in plan.pieces(t.name):
            lo, hi = p.columns or (0, t.width)
            share = 1 / len(p.servers)
            for s in p.servers:
                out["bytes"][s] += t.rows * share * t.row_bytes(hi - lo)
                out["ids"][s] += t.ids_per_step * share
                out["requests"][s] += 2  # a pull and a push
    return out


def balance(values: np.ndarray) -> float:
    """The busiest server's load over the mean (1.0: even)."""
    mean = float(np.mean(values))
    return float(np.max(values)) / mean if mean > 0 else 1.0


def propose(stats: list[TableStats], n_servers: int, budget: int = 0, tolerance: float = 1.15,
            pinned=()) -> ShardingPlan:
    """The plan with the fewest requests a step found within ``tolerance`` (and ``budget`` bytes a
    server, 0: none); a ValueError when the tables cannot fit the servers' budget at all.
    ``pinned``: tables that stay row-wise over every server (clustered ones, ``compression.saec.ratio``)."""
    if n_servers < 1:
        raise ValueError(f"a plan needs at least one server, got {n_servers}")
    if tolerance < 1:
        raise ValueError(f"tolerance is a ratio of the busiest server's load to the mean, >= 1; got {tolerance}")
    total = sum(t.bytes for t in stats)
    if budget and total > budget * n_servers:
        raise ValueError(f"the tables need about {_gb(total)} ({', '.join(f'{t.name} {_gb(t.bytes)}' for t in _big(stats))}"
                         f"...), {n_servers} servers of {_gb(budget)} hold {_gb(budget * n_servers)} ({total:,} bytes "
                         f"against {budget * n_servers:,}): add servers, raise ps.memory.budget, or store rows smaller "
                         "(compression.storage)")
    hash_plan = ShardingPlan(n_servers)
    for spread_at in SPREAD_AT:
        plan = _pack(stats, n_servers, spread_at, set(pinned))
        load = loads(plan, stats)
        fits = not budget or load["bytes"].max() <= budget
        if fits and balance(load["bytes"]) <= tolerance and balance(load["ids"]) <= tolerance:
            return plan
    return hash_plan


def _pack(stats: list[TableStats], n: int, spread_at: float, pinned: set = frozenset()) -> ShardingPlan:
    """Largest first, each table on the least loaded server, or row-wise over the ``k`` least
    loaded when its load is past ``spread_at`` of a server's mean (k: enough that each share is
    within it; every server at 0). Load: the largest of a server's shares of the mean bytes, ids
    and requests (a piece's pull and push, each server's mean as if every table were whole), so
    that the small tables, light in bytes and ids, also even out the requests."""
    mean_bytes = max(sum(t.bytes for t in stats) / n, 1.0)
    mean_ids = max(sum(t.ids_per_step for t in stats) / n, 1e-9)
    mean_requests = max(len(stats) / n, 1.0)
    weights = {t.name: np.array([t.bytes / mean_bytes, t.ids_per_step / mean_ids]) for t in stats}
    load = np.zeros((n, 3))  # per server: (bytes, ids, requests), each as a share of the mean
    placed = {}
    for t in sorted(stats, key=lambda t: (-weights[t.name].max(), t.name)):
        w = weights[t.name]
        k = 1 if w.max() <= spread_at else n if spread_at == 0 else min(n, math.ceil(w.max() / spread_at))
        k = n if t.name in pinned else k
        w = np.append(w / k, 1 / mean_requests)  # a server of the k: its share, and one piece
        order = np.lexsort((np.arange(n), (load + w).max(axis=1)))  # least loaded first, then lowest index
        servers = tuple(sorted(int(s) for s in order[:k]))
        load[list(servers)] += w
        if servers != tuple(range(n)):
            placed[t.name] = (Piece(servers),)
    return ShardingPlan(n, placed)


def describe(plan: ShardingPlan, stats: list[TableStats]) -> list[str]:
    """One line a table, in natural order (C2 before C10): where its pieces are."""
    lines = []
    for t in sorted(stats, key=lambda t: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", t.name)]):
        pieces = plan.pieces(t.name)
        if len(pieces) > 1:
            where = ", ".join(f"[{p.columns[0]}:{p.columns[1]}) on {_servers(p.servers)}" for p in pieces)
            lines.append(f"{t.name}: column-wise, {where}")
        elif len(pieces[0].servers) == plan.n_shards and plan.n_shards > 1:
            lines.append(f"{t.name}: row-wise over every server")
        elif len(pieces[0].servers) == 1:
            lines.append(f"{t.name}: table-wise on server {pieces[0].servers[0]}")
        else:
            lines.append(f"{t.name}: row-wise over {_servers(pieces[0].servers)}")
    return lines


def _servers(servers: tuple[int, ...]) -> str:
    return "server " + str(servers[0]) if len(servers) == 1 else "servers " + ", ".join(map(str, servers))


def _big(stats: list[TableStats]) -> list[TableStats]:
    return sorted(stats, key=lambda t: -t.bytes)[:3]


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


