"""The embedded default: shard stores in this process, called directly.

With ``threads=0`` every call runs at once on the caller's thread (deterministic, simplest
to debug). With ``threads=k`` calls run on a pool, so requests to different shards
overlap: kernels release the GIL, so shards update in parallel on several cores.
"""

from concurrent.futures import ThreadPoolExecutor

from cardinal.ps.store import ShardStore
from cardinal.ps.transport.base import Completed, FutureHandle, Handle, Transport


class InProcessTransport(Transport):
    def __init__(self, stores: list[ShardStore], threads: int = 0):
        for i, s in enumerate(stores):
            if (s.shard, s.n_shards) != (i, len(stores)):
                raise ValueError(f"store {i} is shard {s.shard} of {s.n_shards}, expected {i} of {len(stores)}")
        self.stores = stores
        self.n_shards = len(stores)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="cardinal-shard") if threads else None

    def _call(self, shard: int, method: str, *args, **kwargs) -> Handle:
        fn = getattr(self.stores[shard], method)
        if self._pool is None:
            return Completed.run(fn, *args, **kwargs)
        return FutureHandle(self._pool.submit(fn, *args, **kwargs), f"{method} on in-process shard {shard}")

    def pull(self, shard, table, ids, *, create, step):
        return self._call(shard, "pull", table, ids, create=create, step=step)

    def push(self, shard, table, ids, grads, *, step):
        return self._call(shard, "push", table, ids, grads, step=step)

    def save(self, shard, root, step):
        return self._call(shard, "save", root, step)

    def load(self, shard, step_path):
        return self._call(shard, "load", step_path)

    def stats(self, shard, digest=False):
        return self._call(shard, "stats", digest)

    def health(self, shard):
        return self._call(shard, "health")

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
