"""Reading a checkpoint back through the public API in several shard counts."""

import numpy as np

from cardinal.sharding.routing import route


def pulled_resharded(step_path, make_store, ids: np.ndarray, n: int, table: str = "t"):
    """(rows of ``ids`` as ``n`` fresh shards loading ``step_path`` serve them, the shards);
    ``make_store(k, n)`` makes shard k of n."""
    shards = [make_store(k, n) for k in range(n)]
    for sh in shards:
        sh.load(str(step_path))
    got = None
    for k, sh in enumerate(shards):
        mine = np.flatnonzero(route(ids, n) == k)
        rows = sh.pull(table, ids[mine], create=False)
        if got is None:
            got = np.zeros((len(ids), rows.shape[1]), rows.dtype)
        got[mine] = rows
    return got, shards
