"""Parameter servers: shard stores, routing, checkpoints, transports and the client."""

from cardinal.ps.client import PSClient
from cardinal.ps.limits import StoreFull, StoreLimits
from cardinal.ps.store import ShardStore, StoreConfig
from cardinal.ps.transport import InProcessTransport


def embedded(config: StoreConfig, n_shards: int = 4, concurrent: bool = False,
             limits: StoreLimits | None = None, *, pull_codec: str = "fp32", push_codec: str = "fp32",
             tier_dir: str | None = None) -> PSClient:
    """The embedded default: ``n_shards`` stores in this process behind a client."""
    stores = [ShardStore(config, s, n_shards, limits, tier_dir) for s in range(n_shards)]
    return PSClient(InProcessTransport(stores, concurrent), pull_codec=pull_codec, push_codec=push_codec)


__all__ = ["PSClient", "ShardStore", "StoreConfig", "StoreLimits", "StoreFull", "InProcessTransport", "embedded"]
