"""Parameter servers, in three folders and what they share:

    server/      a shard store and what it owns (clocks, request log, budget, memory, update
                 log, copies of hot rows), the gRPC servicer and the server process
    client/      ``PSClient``: one table-level API over the shards of any transport
    transport/   how requests reach the shards: in-process or gRPC, and the wire format
    (top)        what both sides read: request checks (``validate.py``) and the store's row
                 limits (``limits.py``); where rows live is ``cardinal/sharding/``'s
"""

from cardinal.ps.client.client import PSClient
from cardinal.ps.limits import StoreFull, StoreLimits
from cardinal.ps.server.store import ShardStore, StoreConfig
from cardinal.ps.transport import InProcessTransport
from cardinal.sharding.plan import ShardingPlan


def embedded(config: StoreConfig, n_shards: int = 4, concurrent: bool = False,
             limits: StoreLimits | None = None, *, pull_codec: str = "fp32", push_codec: str = "fp32",
             tier_dir: str | None = None, plan: ShardingPlan | None = None) -> PSClient:
    """The embedded default: ``n_shards`` stores in this process behind a client; ``plan``: where
    each table's rows live (``sharding/plan.py``), row-wise over every shard when None."""
    stores = [ShardStore(config, s, n_shards, limits, tier_dir, plan) for s in range(n_shards)]
    return PSClient(InProcessTransport(stores, concurrent), pull_codec=pull_codec, push_codec=push_codec, plan=plan)


__all__ = ["PSClient", "ShardingPlan", "ShardStore", "StoreConfig", "StoreLimits", "StoreFull", "InProcessTransport", "embedded"]
