"""How a client cuts one table's request into requests to shards, by its sharding plan
(``sharding/plan.py``): one ``Part`` per piece of the table and per server of that piece that has
ids, each with the positions of its ids in the request, in their original order (a stable
split: duplicate gradients add up in the same order for any shard count)."""

from typing import NamedTuple

import numpy as np

from cardinal.sharding.plan import ShardingPlan
from cardinal.sharding.routing import group


class Part(NamedTuple):
    name: str                          # the stored table: the table, a piece of it, or its copies
    columns: tuple[int, int] | None    # the piece's columns, all of them when None
    shard: int
    pos: np.ndarray                    # positions in the request of the ids this part carries


def parts_of(plan: ShardingPlan, table: str, ids: np.ndarray, every: bool = False) -> list[Part]:
    """The parts of a request for ``ids`` in ``table``: each piece, each of its shards that has
    ids (``every``: each of its shards); a piece's first shard when it has none."""
    out = []
    for piece in plan.pieces(table):
        name = piece.name(table)
        if plan.n_shards == 1:  # every id on the one server, in order: nothing to hash or group
            out.append(Part(name, piece.columns, 0, np.arange(len(ids))))
            continue
        order, offsets = group(plan.route(name, ids), plan.n_shards)
        found = [(s, order[offsets[s]:offsets[s + 1]]) for s in (piece.servers if every else range(plan.n_shards))
                 if every or offsets[s + 1] > offsets[s]]
        out += [Part(name, piece.columns, s, pos) for s, pos in found or [(piece.servers[0], order)]]
    return out


def by_shard(name: str, shards: np.ndarray, pos: np.ndarray, n_shards: int) -> list[Part]:
    """Parts of the stored table ``name`` (whole rows) for the ids at ``pos``, each read from
    ``shards`` (one a position), for each shard that has any."""
    order, offsets = group(shards, n_shards)
    return [Part(name, None, s, pos[order[offsets[s]:offsets[s + 1]]]) for s in range(n_shards)
            if offsets[s + 1] > offsets[s]]
