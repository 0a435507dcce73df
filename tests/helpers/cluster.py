"""In-process gRPC servers for tests: 127.0.0.1, ports picked by the OS, always stopped; and raw
calls to them, past every check a client makes."""

import grpc

from cardinal.ps import ShardStore, StoreConfig, StoreLimits, connect
from cardinal.ps.server.process import ServerOptions, ShardServer
from cardinal.ps.transport import wire

JOB, TOKEN = "test-job", "s3cret"
AUTH = (("x-cardinal-job", JOB), ("x-cardinal-token", TOKEN))


def raw_call(address: str, method: str, message: bytes, metadata=AUTH) -> bytes:
    """``message`` (``wire.encode``d) to ``method`` of the server at ``address``, as sent."""
    with grpc.insecure_channel(address, [("grpc.max_send_message_length", 64 << 20)]) as ch:
        return ch.unary_unary(f"/{wire.SERVICE}/{method}")(message, metadata=metadata, timeout=20)


class Cluster:
    def __init__(self, config: StoreConfig, n: int, data_dir, max_message_mb: int = 64,
                 limits: StoreLimits | None = None, plan=None, **options):
        """``data_dir``: one directory every server shares, or a list of one per server (its own disk);
        ``plan``: the servers' and the client's sharding plan (hash when None)."""
        self.stores = [ShardStore(config, i, n, limits, plan=plan) for i in range(n)]
        self.data_dir = data_dir
        dirs = data_dir if isinstance(data_dir, list) else [data_dir] * n
        opts = ServerOptions(max_message_mb=max_message_mb, **options)
        self.servers = []
        try:
            for s, d in zip(self.stores, dirs, strict=True):
                self.servers.append(ShardServer(s, d, JOB, TOKEN, opts).start())
        except BaseException:
            self.stop()
            raise
        self.addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
        self.client = connect(servers=self.addresses, job=JOB, token=TOKEN, timeout=20, max_message_mb=max_message_mb,
                              plan=plan)

    def stop(self):
        for s in self.servers:
            s.stop(0)
