"""``ShardStore``: every table's part on one shard, behind validated requests.

The store is pure: no sockets, no threads of its own. The in-process transport calls it
directly; the gRPC servicer decodes a request, calls the same methods, encodes the reply.
Every request is checked in full before anything changes (``ps/validate.py``), so a rejected
request leaves the store as it was. The row limits live here too, so they hold for every
transport (``ps/limits.py``): rows per server and per request (``StoreFull``: nothing created, no
sighting counted), the byte budget with eviction and time-to-live (``memory.py``), a push whose result would not be finite (refused whole, by the table), and
exactly-once request ids with a bounded window per client (``request_log.py``). A table is used
through ``embedding/protocol.py`` only: after each push it runs what its schedule has due
(``embedding/after_push.py``: a chunked table's pass over which chunks each row keeps, a clustering
into the Saec table that replaces it, handed over under its lock), and every request runs on the
table object the store holds when it gets that lock. Copies of
other servers' hot rows (``replicas.py``, named ``<table>-replica``) answer pulls and take
refreshes (a push of kind "replica"), nothing else.
"""

import threading
import uuid
import weakref
import zlib
from dataclasses import dataclass, field, replace

import numpy as np

from cardinal.embedding import EmbeddingTable, TableConfig, after_push
from cardinal.embedding.admission import make_filter
from cardinal.embedding.protocol import Table
from cardinal.embedding.table_config import SaecSpec, portable_width
from cardinal.embedding.tiers import RocksTier
from cardinal.embedding.tiers.claim import TierDir
from cardinal.optim import make_optimizer
from cardinal.ps import validate
from cardinal.ps.limits import StoreFull, StoreLimits
from cardinal.ps.server.budget import Budget, NeedRoom
from cardinal.ps.server.memory import Memory
from cardinal.ps.server.process_memory import deletion_log_bytes, rocks_memory
from cardinal.ps.server.replicas import CopiedRows
from cardinal.ps.server.request_log import RequestLog
from cardinal.ps.server.step_clock import StepClock
from cardinal.ps.server.store_checkpoints import StoreCheckpoints
from cardinal.ps.server.update_log import UpdateLog
from cardinal.ps.server.worker_steps import WorkerSteps, combined_counts
from cardinal.ps.transport.requests import Origin
from cardinal.ps.validate import quote
from cardinal.recipe.admission import AdmissionConfig
from cardinal.recipe.eviction import EvictionConfig
from cardinal.sharding.plan import ShardingPlan


@dataclass(frozen=True)
class StoreConfig:
    """The tables every shard holds a part of, their sparse optimizer, each table's admission
    filter (``embedding/admission``; a table not named admits every id) and the eviction
    settings (``memory.py``). ``chunk_every`` and ``saec`` (name -> ``SaecSpec``), when given, are
    written into the tables' configs (``TableConfig.chunk_every``: the steps between passes over
    chunked rows; ``TableConfig.saec``: clustered while training), the recipe's way of setting them
    for every table; ``saec`` then names each table that has a spec."""

    tables: tuple[TableConfig, ...]
    optimizer: dict = field(default_factory=lambda: {"name": "rowwise_adagrad"})
    admission: dict[str, AdmissionConfig] = field(default_factory=dict)
    eviction: EvictionConfig = field(default_factory=EvictionConfig)
    chunk_every: int | None = None
    saec: dict[str, SaecSpec] = field(default_factory=dict)

    def __post_init__(self):
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            raise ValueError(f"table names must be unique, got {names}")
        make_optimizer(self.optimizer)  # fail early on a bad optimizer spec
        unknown = sorted(set(self.admission) - set(names))
        if unknown:
            raise ValueError(f"admission names table {unknown[0]!r}, which is not one of {sorted(names)}")
        for name, spec in self.admission.items():
            if not isinstance(spec, AdmissionConfig):
                raise TypeError(f"admission[{name!r}] must be an AdmissionConfig, got {type(spec).__name__}")
        if not isinstance(self.eviction, EvictionConfig):
            raise TypeError(f"eviction must be an EvictionConfig, got {type(self.eviction).__name__}")
        if self.chunk_every is not None and (not isinstance(self.chunk_every, int) or isinstance(self.chunk_every, bool)
                                             or self.chunk_every < 1):
            raise ValueError(f"chunk_every must be an integer >= 1, got {self.chunk_every!r}")
        for name, spec in self.saec.items():
            if name not in names:
                raise ValueError(f"saec names table {name!r}, which is not one of {sorted(names)}")
            if not isinstance(spec, SaecSpec):
                raise TypeError(f"saec[{name!r}] must be a SaecSpec, got {type(spec).__name__}")
            if next(t for t in self.tables if t.name == name).chunks != 1:
                raise ValueError(f"saec: table {name!r} has chunked rows (chunks > 1), which Saec cannot cluster")
        every = {} if self.chunk_every is None else {"chunk_every": self.chunk_every}
        tables = tuple(replace(t, **every, saec=self.saec.get(t.name, t.saec)) for t in self.tables)
        object.__setattr__(self, "tables", tables)  # frozen: set once, here
        object.__setattr__(self, "saec", {t.name: t.saec for t in tables if t.saec is not None})


class ShardStore(StoreCheckpoints):
    """Requests here; saving and loading checkpoints in ``store_checkpoints.py``.
    ``tier_dir``: the directory in which the disk tier makes a directory of its own when
    ``limits.disk_budget`` is set (the system's temporary directory when None); ``close``, or
    the store's end, removes it."""

    def __init__(self, config: StoreConfig, shard: int = 0, n_shards: int = 1, limits: StoreLimits | None = None,
                 tier_dir: str | None = None, plan: ShardingPlan | None = None):
        if not 0 <= shard < n_shards:
            raise ValueError(f"shard must be in [0, {n_shards}), got {shard}")
        self.plan = plan or ShardingPlan(n_shards)
        if self.plan.n_shards != n_shards:
            raise ValueError(f"the sharding plan is for {self.plan.n_shards} shards, this store is one of {n_shards}")
        self.config = self.plan.shard_config(config, shard)  # the pieces of tables on this shard (sharding/plan.py)
        split = [t.name for t in config.tables if len(self.plan.pieces(t.name)) > 1]
        if split and limits is not None and limits.memory_budget:
            raise ValueError(f"the sharding plan splits table {split[0]!r} by columns, and with ps.memory.budget each "
                             "server would evict its own piece of a row, leaving the row half trained: place it "
                             "row-wise or table-wise, or set no budget")
        self.tables_of_plan = tuple(t.name for t in config.tables)  # every table of the job, on any shard
        self.replicas = {self.plan.replica_name(t.name): CopiedRows(t.name, self.plan.replicas[t.name], t.dim)
                         for t in config.tables if t.name in self.plan.replicas}
        self.shard, self.n_shards = shard, n_shards
        self.limits = limits or StoreLimits()
        self.incarnation = uuid.uuid4().hex
        self.clock = StepClock(self.limits.max_step_ahead)  # steps judged against this server's own (step_clock.py)
        self.requests = RequestLog(self.limits)
        self.steps = WorkerSteps()
        self.log = UpdateLog()  # rows each update of several workers changed (worker caches' invalidations)
        self._admitting = threading.Lock()
        self._pending = 0  # rows admitted, not yet counted in len(table)
        copies = sum(c.nbytes for c in self.replicas.values())  # a fixed part of the budget: the tables get the rest
        if self.limits.memory_budget and copies >= self.limits.memory_budget:
            raise ValueError(f"the copies of hot rows (plan.replicate) take {copies} bytes on each server, "
                             f"ps.memory.budget is {self.limits.memory_budget}: copy fewer ids or raise the budget")
        self.memory = Memory(config.eviction, self.limits.memory_budget and self.limits.memory_budget - copies,
                             self.limits.disk_budget)
        self.budget = Budget(self.memory, self.config.admission)
        self._tiers = None
        if self.limits.disk_budget:
            claimed = TierDir(tier_dir, shard)  # locked while this store lives; a killed one's are reclaimed
            self._tiers = claimed.path
            self._tier_list: list[RocksTier] = []  # every tier made, closed with the store
            self._tier_files = weakref.finalize(self, _remove_tiers, claimed, self._tier_list)
        self.tables = self._fresh_tables()
        self._staged = None  # the load being prepared, or prepared (store_checkpoints.py)
        self._verified: set = set()  # checkpoint files verified as they are, for loads over the wire
        self._saved: int | None = None  # the step last saved or loaded: what a delta checkpoint may apply on
        self._stepped_back = False  # a request of a step <= _saved came since: a delta would miss its rows
        self._reshaped = False  # a table's schedule changed rows since _saved that a delta would not hold
        self._staging_lock = threading.Lock()

    def _fresh_tables(self, step: int = 0) -> dict[str, Table]:
        """Every table of this shard, empty, its schedule starting at ``step`` (a load's)."""
        tables = {}
        for t in self.config.tables:
            optimizer = make_optimizer(self.config.optimizer)
            cold = None
            if self._tiers is not None:
                cold = RocksTier(self._tiers / f"{t.name}-shard{self.shard}-{uuid.uuid4().hex[:8]}",
                                 portable_width(t, optimizer),
                                 *rocks_memory(self.limits.memory_budget, len(self.config.tables)))
                self._tier_list.append(cold)
            tables[t.name] = EmbeddingTable(t, optimizer, admission=make_filter(self.config.admission.get(t.name)),
                                            cold=cold, schedule=after_push.schedule(t, step))
            tables[t.name].deleted.cap = deletion_log_bytes(self.limits.memory_budget, len(self.config.tables))
        return tables

    @property
    def step(self) -> int:
        """The newest step this shard accepted: its clock (``step_clock.py``)."""
        return self.clock.step

    def close(self) -> None:
        """Remove the disk tier's files (the store's rows go with them)."""
        if self._tiers is not None:
            self._tier_files()

    # --- requests ----------------------------------------------------------------------

    def pull(self, table: str, ids: np.ndarray, *, create: bool = True, step: int = 0,
             request_id: str | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Rows of ``ids`` (into ``out`` when given: a reply being built, ``servicer.py``); a pull
        resent with the same ``request_id`` counts no second sighting. Of copied hot rows
        (``<table>-replica``): the copies, or none when older than their bound (so never into ``out``)."""
        if not isinstance(create, bool):
            raise TypeError(f"create must be a bool, got {type(create).__name__}")
        if table in self.replicas:
            if out is not None:
                raise ValueError(f"out: copies of hot rows ({table!r}) may answer none, so they are not pulled into one")
            return self.replicas[table].read(ids, step)
        self._check_ids(table, ids)
        validate.check_step(step)
        if create:
            self.clock.admit(step)
        fingerprint = _fingerprint(request_id, table, f"pull {create} {step}", ids)
        rows = self.requests.run(request_id, fingerprint,
                                 lambda: self._on(table, lambda t: t.pull(ids, create=create, step=step,
                                                                          admit=self._admit, out=out), step),
                                 lambda: self._on(table, lambda t: t.pull(ids, create=False, out=out)))
        if create:
            self.clock.advance(step)
            self._note_step(step)
            self.memory.after(self.tables, step)
        return rows

    def push(self, table: str, ids: np.ndarray, grads: np.ndarray, *, step: int = 0, kind: str = "grad",
             request_id: str | None = None, origin: Origin | None = None, counts: np.ndarray | None = None) -> dict:
        """Gradients for the optimizer, or (``kind="delta"``) changes to add to the values; a
        push resent with the same ``request_id`` is applied once. A push that would make any
        value or optimizer state non-finite is refused whole (``NonFiniteUpdate``).

        With an ``origin`` (several workers, ``worker_steps.py``) the push moves that worker's
        clock, is held until the step is whole when ``origin.combine``, and its learning rate is
        divided by ``origin.staleness`` (a combined step's: the largest of its pushes') when above 1. Returns {"clock": the slowest
        worker's clock} for such a push, else {}; with ``origin.since >= 0`` also "log": the
        update log after that position (``update_log.py``), read after the clock.

        ``counts`` (len(ids),) int32 >= 1: how many updates each gradient row accumulates (a
        worker cache's pending sum; ``optim/base.py``); None is one each. Rows merged (duplicate
        ids, a combined step's workers) take the largest count: they are parts of one update.

        A push of kind "replica" to ``<table>-replica`` refreshes this server's copies of that
        table's hot rows with the rows in ``grads``, read from their own servers at ``step``."""
        if table in self.replicas or kind == "replica":
            if table not in self.replicas or kind != "replica" or origin is not None or counts is not None:
                raise ValueError(f"a push of kind 'replica' (and nothing else) refreshes the copies of hot rows, "
                                 f"{sorted(self.replicas)} on this server; got kind {quote(str(kind))} to {table!r}"
                                 + (" with an origin or counts" if origin is not None or counts is not None else ""))
            validate.check_step(step)
            self.clock.admit(step)
            self.replicas[table].write(ids, grads, step)
            return {}
        self._check_ids(table, ids)
        validate.check_grads(grads, len(ids), self.tables[table].dim, table)
        validate.check_step(step)
        validate.check_kind(kind)
        validate.check_counts(counts, len(ids), kind)
        self.clock.admit(step)
        validate.check_bound(grads, kind, self.limits.max_gradient, table)
        if origin is not None:
            if not isinstance(origin, Origin):
                raise TypeError(f"origin must be an Origin, got {type(origin).__name__}")
            if kind != "grad":
                raise ValueError("only gradient pushes carry an origin (GEO deltas move no clock)")
        fingerprint = _fingerprint(request_id, table, f"push {kind} {step} {origin}", ids, grads,
                                   *(() if counts is None else (counts,)))
        reply = (lambda: self._push_reply(table, origin)) if origin is not None else dict
        self.requests.run(request_id, fingerprint, lambda: self._apply_push(table, ids, grads, step, kind, origin, counts),
                          lambda: None)
        self.clock.advance(step)
        self._note_step(step)
        self.memory.after(self.tables, step)
        if self.tables[table].after_push(step, lambda successor: self.tables.__setitem__(table, successor)):
            self._reshaped = True
        return reply()

    def _on(self, table: str, fn, step: int = 0):
        """``fn(t)`` on table ``table`` holding its lock, ``t`` still the store's table then (a
        clustering may have replaced the one first looked up); tried again once room is made when its
        new rows would pass the memory budget (``budget.py``; ``step``: the request's)."""
        while True:
            t = self.tables[table]
            try:
                with t.lock:
                    if self.tables[table] is t:
                        return fn(t)
            except NeedRoom as room:
                self.budget.make_room(self.tables, room, step)

    def _note_step(self, step: int) -> None:
        if self._saved is not None and step <= self._saved:
            self._stepped_back = True

    def _push_reply(self, table: str, origin: Origin) -> dict:
        clock = self.steps.clock(table, origin.workers)  # first: every update of steps <= clock is logged by now
        if origin.since < 0:
            return {"clock": clock}
        return {"clock": clock, "log": self.log.since(table, origin.since, origin.worker, clock)}

    def _apply_push(self, table, ids, grads, step, kind, origin: Origin | None, counts) -> None:
        if origin is None:
            self._on(table, lambda t: t.push(ids, grads, step=step, kind=kind, admit=self._admit, counts=counts), step)
            return
        self.steps.admit(table, step, origin)
        if not origin.combine or origin.workers == 1:
            self._on(table, lambda t: t.push(ids, grads, step=step, admit=self._admit,
                                             lr_scale=_lr_scale(origin.staleness), counts=counts), step)
            if origin.workers > 1:  # logged before the clock moves past it
                self.log.append(table, step, [(origin.worker, ids, counts)])
            self.steps.applied(table, step, origin.worker, origin.parts)
            return
        whole = self.steps.hold(table, step, origin, ids, grads, counts)
        if whole is None:
            return
        parts, staleness = whole
        try:  # every worker's push of the step, in (worker, part) order: one update, whatever the arrival order
            self._on(table, lambda t: t.push(np.concatenate([p[0] for p in parts]),
                                             np.concatenate([p[1] for p in parts]), step=step, admit=self._admit,
                                             lr_scale=_lr_scale(staleness), counts=combined_counts(parts)), step)
        except BaseException:
            self.steps.withdraw(table, step, origin)
            raise
        self.log.append(table, step, [(w, p[0], p[2]) for w, p in zip(self.steps.senders(table, step), parts)])
        self.steps.finish(table, step, origin.workers)

    def _admit(self, n_new: int, table):
        """Reserve ``n_new`` rows of ``table`` under the limits, or raise ``StoreFull`` (``NeedRoom``: not
        yet under the budget); returns the release to call once the rows exist (a table calls this
        with its own lock held)."""
        limit = self.limits.max_new_rows_per_request
        if n_new > limit:
            raise StoreFull(f"this request would create {n_new} rows, over ps.limits.max_new_rows_per_request = "
                            f"{limit}; send fewer new ids per request")
        reserved = self.budget.reserve(self.tables, table, n_new)
        with self._admitting:
            held = sum(len(t) for t in self.tables.values()) + self._pending
            if held + n_new > self.limits.max_rows:
                self.budget.release(reserved)
                raise StoreFull(f"store full: shard {self.shard} holds {held} rows and this request would create "
                                f"{n_new} more, over ps.limits.max_rows = {self.limits.max_rows}; add shards or raise "
                                "ps.limits.max_rows")
            self._pending += n_new

        def release():
            with self._admitting:
                self._pending -= n_new
            self.budget.release(reserved)
        return release

    def _check_ids(self, table, ids):
        validate.check_table(table, self.tables)
        validate.check_ids(ids)
        validate.check_routing(ids, self.shard, self.plan, table)

    def stats(self, digest: bool = False, check: bool = False) -> dict:
        """Rows and bytes per table; with ``digest`` each table's digest, and with ``check``
        the invariants are verified first (an AssertionError names the broken one)."""
        if check:
            self.check()
        tables = {}
        for name, t in self.tables.items():
            tables[name] = t.stats()
            if digest:
                tables[name]["digest_parts"] = t.digest_parts()
        return {"shard": self.shard, "n_shards": self.n_shards, "step": self.clock.step, "tables": tables,
                "plan": self.plan.summary(), "replicas": {n: r.stats() for n, r in self.replicas.items()},
                "bytes": sum(t["bytes"] for t in tables.values()) + sum(c.nbytes for c in self.replicas.values()),
                "memory_budget": self.limits.memory_budget,
                "disk_bytes": sum(t["disk_bytes"] for t in tables.values()), "disk_budget": self.memory.disk_budget,
                "clocks": self.steps.clocks(), "clock_base": self.steps.base, "held": self.steps.held()}

    def health(self) -> dict:
        """``delta_safe``: whether the next checkpoint may be a delta on the last one (the trainer
        saves a full one where a shard says no)."""
        return {"status": "serving", "shard": self.shard, "n_shards": self.n_shards,
                "incarnation": self.incarnation, "delta_safe": self._why_no_delta() is None}

    def check(self) -> None:
        for t in self.tables.values():
            t.check()


def _remove_tiers(claimed: TierDir, tiers: list) -> None:
    for tier in tiers:
        tier.close()
    claimed.release()


def _lr_scale(staleness: int) -> float:
    """Staleness compensation: a gradient computed from rows s steps behind takes 1/s of the step."""
    return 1.0 / staleness if staleness > 1 else 1.0


def _fingerprint(request_id: str | None, table: str, what: str, *arrays: np.ndarray) -> int:
    """crc32 of a request's table, kind, step and arrays: a resend must carry the same."""
    if request_id is None:
        return 0
    crc = zlib.crc32(f"{table} {what}".encode())
    for a in arrays:
        crc = zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B") if a.size else b"", crc)
    return crc
