"""Parameter servers: shard stores, routing, checkpoints, transports and the client."""

from cardinal.ps.client import PSClient
from cardinal.ps.limits import StoreFull, StoreLimits
from cardinal.sharding.plan import ShardingPlan
from cardinal.ps.store import ShardStore, StoreConfig
from cardinal.ps.transport import InProcessTransport


def embedded(config: StoreConfig, n_shards: int = 4, concurrent: bool = False,
             limits: StoreLimits | None = None, *, pull_codec: str = "fp32", push_codec: str = "fp32",
             tier_dir: str | None = None, plan: ShardingPlan | None = None) -> PSClient:
    """The embedded default: ``n_shards`` stores in this process behind a client; ``plan``: where
    each table's rows live (``sharding/plan.py``), row-wise over every shard when None."""
    stores = [ShardStore(config, s, n_shards, limits, tier_dir, plan) for s in range(n_shards)]
    return PSClient(InProcessTransport(stores, concurrent), pull_codec=pull_codec, push_codec=push_codec, plan=plan)


__all__ = ["PSClient", "ShardingPlan", "ShardStore", "StoreConfig", "StoreLimits", "StoreFull", "InProcessTransport", "embedded"]
