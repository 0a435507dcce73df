"""``connect()``: the one way to a ``PSClient``, to shard stores in this process or to servers.

    client = connect(StoreConfig(tables, optimizer), 4)                 # 4 embedded shard stores
    client = connect(config, servers=["10.0.0.1:7000", "10.0.0.2:7000"], job="ctr", token=token)

Training (``train/builder.py``), benchmarks and tests make their clients here, so that which
transport a client gets, and with what options, is decided in one place: only the server
addresses change between a run in one process and a run over many machines.
"""

from collections.abc import Sequence

from cardinal.ps.client.client import PSClient
from cardinal.ps.limits import StoreLimits
from cardinal.ps.server.store import ShardStore, StoreConfig
from cardinal.ps.transport.base import DEFAULT_TIMEOUT
from cardinal.ps.transport.grpc_transport import GrpcTransport
from cardinal.ps.transport.inprocess import InProcessTransport
from cardinal.sharding.plan import ShardingPlan


def connect(config: StoreConfig | None = None, shards: int = 4, *, servers: Sequence[str] = (),
            plan: ShardingPlan | None = None, pull_codec: str = "fp32", push_codec: str = "fp32",
            concurrent: bool = False, lanes: int | None = None, inline: bool = True, limits: StoreLimits | None = None,
            tier_dir: str | None = None,
            job: str = "cardinal", token: str = "", timeout: float = DEFAULT_TIMEOUT, tls_ca: str | None = None,
            max_message_mb: int = 64, calls: int = 16, worker: int = 0, workers: int = 1,
            shared_memory: bool = True) -> PSClient:
    """A client with ``plan`` (row-wise over every shard when None), rows crossing as
    ``pull_codec`` and gradients as ``push_codec`` (``cardinal.codecs``).

    No ``servers``: ``shards`` stores of ``config`` in this process (``concurrent``: on ``lanes``
    threads of their own, ``ps/transport/inprocess.py``), with ``limits`` and their disk tiers under
    ``tier_dir``; they are this client's own, so it is worker 0 of 1 whatever ``worker`` and ``workers`` say.

    ``servers`` (host:port, one per shard): ``cardinal server`` processes of ``job``, reached over
    gRPC with ``token`` (TLS when ``tls_ca`` names what to trust), each call's deadline
    ``timeout`` s, messages of at most ``max_message_mb``. This client is ``worker`` of
    ``workers``, which share the ``calls`` each server reads at once: it keeps at most its share
    in flight to each. With ``config``, each server is checked to hold the pieces of its tables
    that the plan puts there (``PSClient.check_plan``). A pull's rows from a server on this host
    come through shared memory unless ``shared_memory`` is False (``ps/transport/shared_rows.py``)."""
    codecs = {"pull_codec": pull_codec, "push_codec": push_codec}
    if not servers:
        if config is None:
            raise ValueError("connect: embedded shard stores need the store config (no servers given)")
        stores = [ShardStore(config, s, shards, limits, tier_dir, plan) for s in range(shards)]
        return PSClient(InProcessTransport(stores, concurrent, lanes, inline), **codecs, plan=plan)
    transport = GrpcTransport(servers, job, token, timeout=timeout, tls_ca=tls_ca, max_message_mb=max_message_mb,
                              max_in_flight=max(1, calls // workers), share=workers, shared_memory=shared_memory)
    client = PSClient(transport, **codecs, plan=plan, worker=worker, workers=workers)
    if config is not None:
        client.check_plan([t.name for t in config.tables], timeout)
    return client
