"""Parameter servers: shard stores, routing, checkpoints, transports and the client."""

from cardinal.ps.client import PSClient
from cardinal.ps.limits import StoreFull, StoreLimits
from cardinal.ps.store import ShardStore, StoreConfig
from cardinal.ps.transport import InProcessTransport


def embedded(config: StoreConfig, n_shards: int = 4, concurrent: bool = False,
             limits: StoreLimits | None = None) -> PSClient:
    """The embedded default: ``n_shards`` stores in this process behind a client."""
    stores = [ShardStore(config, s, n_shards, limits) for s in range(n_shards)]
    return PSClient(InProcessTransport(stores, concurrent))


__all__ = ["PSClient", "ShardStore", "StoreConfig", "StoreLimits", "StoreFull", "InProcessTransport", "embedded"]
