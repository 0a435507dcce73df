"""``PSClient``: one table-level API over the shards of any transport.

    client = PSClient(InProcessTransport(stores), pull_codec="bf16", push_codec="bf16")
    rows = client.pull("user", ids, step=3).wait()      # (n, dim) float32
    client.push("user", ids, grads, step=3).wait()
    client.save("ckpt/", step=3)                         # every shard, then the commit (checkpoints.py)

The client routes ids to shards by its sharding plan (``sharding/plan.py``: row-wise over every shard
by default; stable), sends one request per (piece, shard) that has ids, and assembles the
answers when waited on: a table split by columns is pulled from each piece and its rows put
side by side, and its gradients cut by the same columns. Every pull and push carries a
request id; on a TransientError the client sends it again, and the store applies it once. A
request is checked here in full before any shard sees it, and every shard checks the rest the
same way, so a bad request is rejected everywhere or nowhere. Hot rows copied to every server
are read by the reader the plan asks for (``hot_rows.py``).

Rows cross as ``pull_codec`` and gradients as ``push_codec`` (``cardinal.codecs``; fp32 by
default, every request of this client), on any transport; ``metrics()`` counts what moved.
"""

import itertools
import time
import uuid
from dataclasses import replace

import numpy as np

from cardinal import codecs
from cardinal.embedding import combine_digests
from cardinal.ps import validate
from cardinal.ps.client.checkpoints import ClientCheckpoints
from cardinal.ps.client.hot_rows import CopyReader, PlainReader
from cardinal.ps.client.parts import parts_of
from cardinal.ps.client.traffic import Traffic
from cardinal.ps.transport.base import DEFAULT_TIMEOUT, Handle, TransientError, Transport
from cardinal.ps.transport.requests import Origin, PullRequest, PushRequest
from cardinal.sharding.plan import ShardingPlan


class Resending(Handle):
    """One request; sent again (same request id) when it fails transiently, up to ``retries`` times."""

    def __init__(self, send, retries: int):
        self.send, self.left = send, retries
        self.handle = send()

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT):
        delay = 0.01
        while True:
            try:
                return self.handle.wait(timeout)
            except TransientError:
                if self.left == 0:
                    raise
                self.left -= 1
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                self.handle = self.send()


class Gathered(Handle):
    """Waits on several shard handles and combines their results."""

    def __init__(self, handles: list[Handle], combine):
        self.handles, self.combine = handles, combine

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT):
        return self.combine([h.wait(timeout) for h in self.handles])


def _push_reply(shards: list[int], replies: list[dict]) -> dict:
    out = {"clock": min(r["clock"] for r in replies)}
    logs = {s: r["log"] for s, r in zip(shards, replies) if "log" in r}
    return {**out, "log": logs} if logs else out


class PSClient(ClientCheckpoints):
    """``plan``: where each table's rows live (``sharding/plan.py``); row-wise over every shard when None.
    ``worker`` of ``workers``: which copies of hot rows this client reads, and which it refreshes."""

    def __init__(self, transport: Transport, retries: int = 5, *, pull_codec: str = "fp32",
                 push_codec: str = "fp32", plan: ShardingPlan | None = None, worker: int = 0, workers: int = 1):
        self.transport, self.retries = transport, retries
        self.pull_codec, self.push_codec = codecs.get(pull_codec), codecs.get(push_codec)
        self.traffic = Traffic()
        self.n_shards = transport.n_shards
        self.plan = plan or ShardingPlan(self.n_shards)
        if self.plan.n_shards != self.n_shards:
            raise ValueError(f"the sharding plan is for {self.plan.n_shards} shards, the transport has {self.n_shards}")
        self._client = uuid.uuid4().hex[:12]
        self._seq = itertools.count()
        if not 0 <= worker < workers:
            raise ValueError(f"worker must be in [0, {workers}), got {worker}")
        self._committed: tuple[int, str] | None = None  # (step, digest) of the checkpoint saved or loaded last
        self._own_disks: list[int] | None = None  # steps kept, when servers keep their parts on their own disks
        self.reader = CopyReader(self, worker, workers) if self.plan.replicas else PlainReader(self)

    def _request_id(self) -> str:
        return f"{self._client}-{next(self._seq)}"

    def pull(self, table: str, ids: np.ndarray, *, create: bool = True, step: int = 0) -> Handle:
        """Rows of ``ids`` (n, dim) float32 on ``wait()``, read where this client's reader says
        (``hot_rows.py``: from copies of hot rows, for a training pull of a table the plan copies)."""
        validate.check_ids(ids)
        if not isinstance(create, bool):
            raise TypeError(f"create must be a bool, got {type(create).__name__}")
        reading = self.reader.read(table, ids, create=create, step=step)
        request = PullRequest(table, ids, create, step, codec=self.pull_codec.name)
        handles = [self._pull(p.shard, request.part(p.name, p.pos, self._request_id())) for p in reading.parts]
        kind = "pull" if create else "lookup"  # training pulls apart from evaluation's
        self.traffic.add(**{f"{kind}_ids": len(ids)})
        counted = []  # traffic counted once, however often the handle is waited on

        def combine(results):
            widths = {p.columns: rows.shape[1] for p, rows in zip(reading.parts, results)}  # a width a piece
            dim = sum(widths.values())
            results = reading.rows(results)
            if not counted:
                self.traffic.add(**{f"{kind}_row_bytes": sum(len(ids) * self.pull_codec.row_bytes(w)
                                                             for w in widths.values())})
                counted.append(True)
            one = reading.parts[0]
            if len(reading.parts) == 1 and one.name == table and len(one.pos) == len(ids) and \
                    results[0].flags.writeable:
                out = results[0]  # one shard holds every id, in order (a stable split): nothing to place
            else:
                out = np.empty((len(ids), dim), np.float32)
                for (_, columns, _, pos), rows in zip(reading.parts, results):
                    lo, hi = columns or (0, dim)
                    out[pos, lo:hi] = rows
            validate.check_decoded(out, self.pull_codec, table)
            return out
        return Gathered(handles, combine)

    def push(self, table: str, ids: np.ndarray, grads: np.ndarray, *, step: int = 0, kind: str = "grad",
             origin: Origin | None = None, counts: np.ndarray | None = None,
             since: list[int] | None = None) -> Handle:
        """Route and send; ``wait()`` gives {} or, for a push with an ``origin`` (one worker of
        several, see ``worker_steps.py``), {"clock": the slowest worker's clock over the shards}.
        ``counts`` (len(ids),) int32 >= 1: updates each gradient row accumulates (``optim/base.py``).
        A push with an origin goes to every shard holding a piece of the table, empty where it
        has no ids, so that each of them sees every worker's every step. ``since`` (with an origin): per shard, the update
        log position to report from; the reply then has "log": {shard: ``UpdateLog.since``}."""
        validate.check_ids(ids)
        if not isinstance(grads, np.ndarray) or grads.ndim != 2 or len(grads) != len(ids):
            raise ValueError(f"gradients must be an array of shape (len(ids), dim) = ({len(ids)}, dim), "
                             f"got {getattr(grads, 'shape', type(grads).__name__)}")
        validate.check_grads(grads, len(ids), grads.shape[1], table)
        validate.check_encodable(grads, self.push_codec, table)
        validate.check_kind(kind)
        validate.check_counts(counts, len(ids), kind)
        last = self.plan.pieces(table)[-1].columns
        if last is not None and last[1] != grads.shape[1]:
            raise ValueError(f"table {table!r} is {last[1]} columns wide by the sharding plan, the gradients "
                             f"{grads.shape[1]}")
        cut = parts_of(self.plan, table, ids, every=origin is not None)
        if since is not None and (origin is None or len(since) != self.n_shards):
            raise ValueError(f"since needs an origin and one position per shard ({self.n_shards}), got {since!r}")
        origins = [origin if since is None else replace(origin, since=since[s]) for s in range(self.n_shards)]
        request = PushRequest(table, ids, grads, step, kind, origin=origin, codec=self.push_codec.name, counts=counts)
        handles = [self._push(s, request.part(name, pos, columns, self._request_id(), origins[s]))
                   for name, columns, s, pos in cut]
        self.traffic.add(push_ids=len(ids), push_row_bytes=len(ids) * self.push_codec.row_bytes(grads.shape[1]))
        if origin is None:
            return Gathered(handles, lambda _: {})
        return Gathered(handles, lambda replies: _push_reply([p.shard for p in cut], replies))

    def metrics(self) -> dict[str, int]:
        """What this client moved (``traffic.py``): ids and row bytes each way, message bytes over gRPC."""
        return self.traffic.metrics(self.transport)

    def clocks(self, workers: int, timeout: float | None = DEFAULT_TIMEOUT) -> dict[str, tuple[int, int, int]]:
        """Per table (clock, culprit, shard): the last step whose pushes by all ``workers``
        workers every shard has applied, the shard where that stands, and the worker it waits
        for there (one missing from the next combined step, else the slowest)."""
        handles = [self.transport.stats(s) for s in range(self.n_shards)]
        out: dict[str, tuple[int, int, int]] = {}
        for s, h in enumerate(handles):
            st = h.wait(timeout)
            for name in st["tables"]:  # a piece of a table (sharding/plan.py) counts for its table
                table = self.plan.locate(name)[0]
                known = st["clocks"].get(name, {})
                c, w = min((known.get(str(w), st["clock_base"]), w) for w in range(workers))
                if table not in out or c < out[table][0]:
                    waiting = st["held"].get(name, {}).get(str(c + 1))
                    if waiting is not None:  # the step after: held, waiting for the workers not yet in
                        w = next((x for x in range(workers) if x not in waiting), w)
                    out[table] = (c, w, s)
        return out

    def _pull(self, shard: int, request: PullRequest) -> Handle:
        return Resending(lambda: self.transport.pull(shard, request), self.retries)

    def _push(self, shard: int, request: PushRequest) -> Handle:
        return Resending(lambda: self.transport.push(shard, request), self.retries)

    def stats(self, check: bool = False) -> list[dict]:
        """Every shard's stats; ``check=True`` verifies each shard's invariants first."""
        return [self.transport.stats(s, check=check).wait() for s in range(self.n_shards)]

    def health(self, timeout: float | None = DEFAULT_TIMEOUT) -> list[dict]:
        return [self.transport.health(s).wait(timeout) for s in range(self.n_shards)]

    def check_unused(self, timeout: float | None = DEFAULT_TIMEOUT) -> None:
        """A new run starts on shards no run has used: a ValueError naming the first one that has
        taken a step or holds rows (another run's, which this one would train on)."""
        for s in range(self.n_shards):
            stats = self.transport.stats(s).wait(timeout)
            rows = sum(t["rows"] for t in stats["tables"].values())
            if stats["step"] or rows:
                raise ValueError(f"server {self.transport.where(s)} (shard {s}) has served another run (up to step "
                                 f"{stats['step']}, {rows} rows): a new run starts on fresh servers (a server ends "
                                 "with its job); start new ones, or resume that run (--resume)")

    def finish(self, step: int, timeout: float | None = DEFAULT_TIMEOUT) -> list[str]:
        """Tell every shard the job ended with its checkpoint of ``step``: each server ends with it
        (``ps/server/process.py``). Every shard is told whatever the others answer; returns, for
        each that did not take it, why, naming it (none when all did)."""
        handles = [self.transport.finish(s, step) for s in range(self.n_shards)]
        refused = []
        for h in handles:
            try:
                h.wait(timeout)
            except Exception as e:  # noqa: BLE001 - the others are still told; each error names its shard
                refused.append(str(e))
        return refused

    def digest(self, table: str) -> str:
        """Digest of a whole table across shards: equal for any shard count and any plan that keeps
        its rows whole (row-wise, table-wise); a table split by columns digests its pieces."""
        stats = [self.transport.stats(s, True).wait() for s in range(self.n_shards)]
        names = set(self.plan.names([table]))
        parts = [tuple(t["digest_parts"]) for st in stats for name, t in st["tables"].items() if name in names]
        if not parts:
            held = sorted({n for st in stats for n in st["tables"]})
            raise ValueError(f"unknown table {table!r}; the stores have {held}")
        return combine_digests(parts)

    def check_plan(self, tables, timeout: float | None = DEFAULT_TIMEOUT) -> None:
        """Each shard holds exactly the pieces of ``tables`` the client's plan puts there: a
        ValueError naming the first that does not (a server started with another plan)."""
        stats = [self.transport.stats(s).wait(timeout) for s in range(self.n_shards)]
        wrong = [(s, sorted(st["tables"]), sorted(self.plan.names(tables, s))) for s, st in enumerate(stats)]
        wrong = [(s, f"it holds tables {held}, this worker's plan puts {want} there") for s, held, want in wrong
                 if held != want]
        mine = self.plan.summary()
        theirs = [(s, st.get("plan", mine)) for s, st in enumerate(stats)]
        wrong += [(s, f"the same tables, their rows on other servers: {p['tables']}") for s, p in theirs
                  if p["tables"] != mine["tables"]]
        wrong += [(s, f"the same placement, other copies of hot rows: {p.get('replicas', {})}, this worker's "
                      f"{mine.get('replicas', {})}") for s, p in theirs if p != mine]
        if wrong:  # a server holding other tables is named first: the plainer mismatch
            s, detail = wrong[0]
            same = "plan.layout" if detail.startswith("the same") else \
                "recipe (its tables follow model.name, embedding.shared, embedding.field_tables and train.baseline; " \
                "where they live, plan.layout)"
            raise ValueError(f"server {s} was started with another sharding plan ({detail}): start every server "
                             f"and worker with the same {same}")
