"""Parameter servers, in three folders and what they share:

    server/      a shard store and what it owns (clocks, request log, budget, memory, update
                 log, copies of hot rows), the gRPC servicer and the server process
    client/      ``connect()``, and ``PSClient``: one table-level API over the shards of any
                 transport
    transport/   how requests reach the shards: in-process or gRPC, and the wire format
    (top)        what both sides read: request checks (``validate.py``) and the store's row
                 limits (``limits.py``); where rows live is ``cardinal/sharding/``'s
"""

from cardinal.ps.client.client import PSClient
from cardinal.ps.client.connect import connect
from cardinal.ps.limits import StoreFull, StoreLimits
from cardinal.ps.server.store import ShardStore, StoreConfig
from cardinal.sharding.plan import ShardingPlan

__all__ = ["connect", "PSClient", "ShardingPlan", "ShardStore", "StoreConfig", "StoreLimits", "StoreFull"]
