"""The embedded default: shard stores in this process, called directly.

``concurrent=False``: every call runs at once on the caller's thread (simplest to debug).
``concurrent=True``: the shards' requests run on a few threads of their own, *lanes*, shard i
on lane i % lanes (``lanes.py``). Requests to one shard run in the order they were sent, as over
a network connection, so results never depend on timing (nor on the lane count); the caller
computes while its pulls and pushes are in flight, and requests on different lanes overlap
(kernels release the GIL). Every request already splits its ids over the kernel threads
(``cardinal/parallel.py``), so lanes beyond what the cores hold only make those threads wait
for one another: on 2 cores, 4 shards at batch 1024 ran 1.02-1.08x as fast on one lane as on
four (``benchmarks/embedded_shards.py --shards 4:4,4:1``; 0.91-1.05x at batch 4096). The default
is one lane per 4 cores, one a shard at most: one lane up to 7 cores, four from 16 (as before
lanes, one thread a shard).

``inline`` (the default), with one lane: a request sent while the lane is idle runs on the
sender's thread, and only one that finds it busy waits for the lane's thread (``Lane``). The
hand-off cost more than the overlap it bought on 2 cores: the shipped recipes trained 1.12x
(criteo, batch 1024; 1.03x at 4096) and 1.26x (MovieLens, 22 requests a step) as fast
(``benchmarks/embedded_shards.py --shards 1:1:handoff,1,1:1:caller``, results/embedded_shards_inline*).
With several lanes each request goes to its lane, so that shards on different lanes overlap.

A codec other than fp32 is applied as a round trip (``Codec.roundtrip``): rows and gradients
are what the gRPC transport would deliver, bitwise, so a recipe gives the same numbers on both.
"""

from cardinal import codecs, parallel
from cardinal.ps.server.store import ShardStore
from cardinal.ps.transport.base import Completed, Handle, Transport
from cardinal.ps.transport.lanes import Lane
from cardinal.ps.transport.requests import PullRequest, PushRequest


CORES_PER_LANE = 4


def default_lanes(n_shards: int, cores: int | None = None) -> int:
    """One lane per ``CORES_PER_LANE`` of ``cores`` (this process's), at least one, at most one a shard."""
    cores = parallel.available_cores() if cores is None else cores
    return max(1, min(n_shards, cores // CORES_PER_LANE))


class InProcessTransport(Transport):
    def __init__(self, stores: list[ShardStore], concurrent: bool = False, lanes: int | None = None,
                 inline: bool = True):
        for i, s in enumerate(stores):
            if (s.shard, s.n_shards) != (i, len(stores)):
                raise ValueError(f"store {i} is shard {s.shard} of {s.n_shards}, expected {i} of {len(stores)}")
        lanes = default_lanes(len(stores)) if lanes is None else lanes
        if not 1 <= lanes <= len(stores):
            raise ValueError(f"lanes must be 1..{len(stores)} (one a shard at most), got {lanes}")
        self.stores = stores
        self.n_shards = len(stores)
        inline = inline and lanes == 1  # with several lanes the shards' requests overlap: each goes to its lane
        self._pools = [Lane(f"cardinal-lane{i}", inline) for i in range(lanes)] if concurrent else []
        self._lanes = [self._pools[i % lanes] for i in range(len(stores))] if concurrent else None

    def _call(self, shard: int, method: str, *args, **kwargs) -> Handle:
        return self._run(shard, method, getattr(self.stores[shard], method), *args, **kwargs)

    def _run(self, shard: int, method: str, fn, *args, **kwargs) -> Handle:
        if self._lanes is None:
            return Completed.run(fn, *args, **kwargs)
        return self._lanes[shard].run(f"{method} on in-process shard {shard}", fn, *args, **kwargs)

    def pull(self, shard: int, request: PullRequest) -> Handle:
        r = request
        if r.codec == "fp32":  # the store's own rows: no round trip, nothing to pay
            return self._call(shard, "pull", r.table, r.ids, create=r.create, step=r.step, request_id=r.request_id)
        rows_codec, store = codecs.get(r.codec), self.stores[shard]
        return self._run(shard, "pull", lambda: rows_codec.roundtrip(
            store.pull(r.table, r.ids, create=r.create, step=r.step, request_id=r.request_id)))

    def push(self, shard: int, request: PushRequest) -> Handle:
        r = request
        if r.codec != "fp32":  # fp32: the store judges the array as given
            grads_codec, store = codecs.get(r.codec), self.stores[shard]
            return self._run(shard, "push", lambda: store.push(r.table, r.ids, grads_codec.roundtrip(r.grads),
                                                         step=r.step, kind=r.kind, request_id=r.request_id,
                                                         origin=r.origin, counts=r.counts))
        return self._call(shard, "push", r.table, r.ids, r.grads, step=r.step, kind=r.kind, request_id=r.request_id,
                          origin=r.origin, counts=r.counts)

    def save(self, shard, root, step, base=None, *, keep=None, dry=False):
        return self._call(shard, "save", root, step, base, keep=keep, dry=dry)

    def load(self, shard, step_path, phase="load", token=None, *, markers=None, part=None):
        return self._call(shard, "load", step_path, phase, token, markers, part)

    def read_part(self, shard, step_path, commit, need, to):
        return self._call(shard, "read_part", step_path, commit, need, to)

    def stats(self, shard, digest=False, check=False):
        return self._call(shard, "stats", digest, check)

    def health(self, shard):
        return self._call(shard, "health")

    def finish(self, shard, step):
        """Checked as a server checks it; the stores themselves end with this process."""
        return self._call(shard, "check_final", step)

    def close(self):
        for lane in self._pools:
            lane.close()
