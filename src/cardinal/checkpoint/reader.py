"""``Reader``: one committed checkpoint, verified once, and everything a load asks of it.

Training (resume, eval), serving (export, follow), the planner and the servers (client and
store) read checkpoints through it and through nothing else, so what a file is called, where it
lies and how it is checked stays in this package:

    r = Reader(step_dir)             its commit verified on open (``verify.py``): r.step, r.n_shards,
                                     r.extra, r.run_id, r.plan, r.sha256, r.identity
    r = Reader(step_dir, markers=m)  the same, its commit and its chain's from ``m`` (step dir name ->
                                     commit): a server with its own disk keeps no commit, the
                                     workers' rank 0 sends it, and its own part is checked against it
    r.marker_chain()                 the commits of its chain, oldest first: what rank 0 sends
    r = Reader.open(path)            a step directory, or the newest committed one under a root
    r.chain                          the checkpoints a load of it reads, oldest first, each a Reader:
                                     itself when full; else the full one its bases lead to, then each
                                     delta; every link checked against the one it applies on
                                     (``chain.py``), once, when first asked
    r.tables                         stored table name -> its manifest entry (dim, width, storage...)
    r.check_compatible(tables, plan) the saved tables are the store's, alike (``verify.py``)
    r.row_chunks(plan, shard, table) a store's table's rows, a verified block at a time (``rows.py``)
    r.deleted_ids(plan, shard, name) a delta's ids deleted since its base
    r.load_admission(plan, shard, tables)   each table's admission filter state
        asking=True                  the three as generators that ask for a part on another server's
                                     disk (a ``Need`` yielded, a ``Part`` sent back: ``parts.py``)
    r.answer(need, plan, to)         what this host's disk holds of a part another shard asks for
    r.clustered_state(name, shard, n_shards)  a clustered table's own files (``clustered.py``)
    r.row_count(table)               rows a table holds once its chain is loaded (the planner's)
    r.dense_state()                  the trainer's dense state (``dense.py``)

Reading the rows of a chain is the caller's, link by link (a store stages them into its tables,
a follower over copies of the served ones); what a table does with them stays with the table.
"""

import os
from pathlib import Path

from cardinal.checkpoint import parts, rows
from cardinal.checkpoint.chain import identity, run_id, walk
from cardinal.checkpoint.clustered import KEY as CLUSTERED, read as read_clustered, refuse_reshard
from cardinal.checkpoint.layout import COMMIT, DENSE, REMOTE, STATE, committed, latest, shard_dir
from cardinal.checkpoint.verify import check_compatible, read_commit, saved_tables
from cardinal.sharding.plan import ShardingPlan


class Reader:
    def __init__(self, path: str | os.PathLike, info: dict | None = None, markers: dict | None = None):
        """``path``: a committed checkpoint's step directory; its commit is read and verified here
        (``info``: when read so already, by the walk of a chain; ``markers``: step directory name ->
        commit, for commits that are not on this host's disk)."""
        self.path, self.markers = Path(path), markers
        self.info = self._read(self.path) if info is None else info
        self._chain: list[Reader] | None = None

    def _read(self, path: Path) -> dict:
        if self.markers is None:
            return read_commit(path)
        if path.name not in self.markers:
            raise ValueError(f"{path}: no commit was sent for it (sent: {sorted(self.markers)})")
        return read_commit(path, self.markers[path.name])

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Reader":
        """``path`` when it is a committed checkpoint, else the newest committed one under it."""
        path = Path(path)
        found = path if committed(path) else latest(path)
        if found is None:
            raise ValueError(f"no committed checkpoint in {path}")
        return cls(found)

    # --- the commit ----------------------------------------------------------------------

    @property
    def step(self) -> int:
        return self.info["step"]

    @property
    def n_shards(self) -> int:
        return self.info["n_shards"]

    @property
    def extra(self) -> dict:
        """What the saver recorded beside the rows (the trainer: step, epoch, data position, best)."""
        return self.info["extra"]

    @property
    def plan(self) -> ShardingPlan:
        """The sharding plan the shards were saved in."""
        return self.info["plan"]

    @property
    def sha256(self) -> str:
        """The digest of its commit: what a delta on it records."""
        return self.info["sha256"]

    @property
    def run_id(self) -> str | None:
        """The id of the run that saved it; None for one from before run ids."""
        return run_id(self.info)

    @property
    def identity(self) -> dict:
        """What a served model records of the checkpoint it came from (``serve/follow.py``)."""
        return identity(self.info)

    @property
    def chain(self) -> list["Reader"]:
        """The checkpoints a load of this one reads, oldest first, this one last; walked and
        verified on first use (every link's commit, and each against the one it applies on)."""
        if self._chain is None:
            exists = None if self.markers is None else (lambda p: p.name in self.markers)
            links = walk(self.path, lambda p: self.info if p is self.path else self._read(p), exists)
            chain = [Reader(p, info, self.markers) for p, info in links[:-1]] + [self]
            for k, link in enumerate(chain):
                link._chain = chain[:k + 1]
        return self._chain

    @property
    def remote(self) -> dict:
        """Shard dir name -> {"server", "manifest"} of the shards saved on their server's own disk."""
        return self.info.get(REMOTE, {})

    def marker_chain(self) -> list[dict]:
        """The commits of its chain as saved, oldest first: what a server with its own disk is sent to
        load its part (``Reader(..., markers=...)`` there)."""
        return [link.info["marker"] for link in self.chain]

    # --- the tables ----------------------------------------------------------------------

    @property
    def tables(self) -> dict:
        """Stored table name (a piece's, ``sharding/plan.py``) -> its manifest entry (the first shard's
        that holds it): dim, width, storage, chunks, optimizer, rows, files."""
        return saved_tables(self.info)

    def check_compatible(self, tables: dict, plan: ShardingPlan | None = None, names=None) -> None:
        """The saved tables are exactly the store's (``verify.check_compatible``), or a ValueError."""
        check_compatible(self.path, self.info, tables, plan, names)

    def row_chunks(self, plan: ShardingPlan, shard: int, table, size: int = 1 << 20, *, asking: bool = False):
        """(where, ``Columns``) blocks of the rows of the store's table ``table`` for shard ``shard``
        of ``plan``, each verified as it is read (``rows.table_chunks``). ``asking``: a part on
        another server's disk is asked for (``parts.py``), else refused naming that server."""
        chunks = rows.table_chunks(self.path, self.info, plan, shard, table, size)
        return chunks if asking else parts.here(chunks, self.path, self.info)

    def shard_rows(self, plan: ShardingPlan, shard: int, tables: dict) -> dict:
        """Rows for shard ``shard`` of ``plan``, whole: {table: {column: array}}, checked compatible first."""
        return rows.load_shard_rows(self.path, self.info, plan, shard, tables)

    def deleted_ids(self, plan: ShardingPlan, shard: int, name: str, *, asking: bool = False):
        """A delta's ids of the store's table ``name`` deleted since its base, those of ``shard``
        (``asking``: a generator returning them, ``ids = yield from ...``)."""
        ids = rows.deleted_ids(self.path, self.info, plan, shard, name)
        return ids if asking else parts.value(ids, self.path, self.info)

    def load_admission(self, plan: ShardingPlan, shard: int, tables: dict, *, asking: bool = False):
        """Each table's admission filter state into ``tables``' filters (``rows.load_admission``;
        ``asking``: a generator, ``yield from ...``)."""
        loading = rows.load_admission(self.path, self.info, plan, shard, tables)
        return loading if asking else parts.value(loading, self.path, self.info)

    def answer(self, need, plan: ShardingPlan, to: int, max_bytes: int | None = None, verified: set | None = None):
        """The ``Part`` this host's disk holds of ``need`` for shard ``to`` of ``plan`` (``rows.answer``)."""
        return rows.answer(self.path, self.info, need, plan, to, max_bytes, verified)

    def clustered_state(self, name: str, shard: int, n_shards: int) -> tuple[dict, int, int] | None:
        """Table ``name`` as shard ``shard`` of ``n_shards`` saved it when that shard saved it clustered:
        (state, clusters, shift), every file verified, for ``SaecTable.from_state``; None when saved as
        rows. A ValueError when the table is clustered and ``n_shards`` is not the count that saved it,
        or its files are on another server's disk (its clusters are not rows another server could send)."""
        refuse_reshard(self.path, self.info, name, n_shards)
        own = shard_dir(self.path, shard, n_shards)
        if CLUSTERED not in self.info["manifests"].get(own.name, {}).get("tables", {}).get(name, {}):
            return None
        server = parts.elsewhere(self.path, self.info, shard, n_shards)
        if server is not None:
            raise ValueError(f"checkpoint {self.path.name}: table {name!r} is clustered (Saec), and shard {shard}'s "
                             f"files are on the disk of its server ({server}), not this one's: a clustered table "
                             f"loads only from its own server's disk (start shard {shard} on that disk)")
        return read_clustered(self.path, self.info, own, shard, name)

    def row_count(self, table: str) -> int | None:
        """The rows the job's table ``table`` holds once this checkpoint is loaded: its first piece's
        (every piece holds the same ids), summed over the shards, or for a delta counted over its
        chain (a delta's manifests count only the rows touched since its base); None when no shard
        holds it."""
        first = self.plan.pieces(table)[0].name(table)
        held = [m["tables"][first] for m in self.info["manifests"].values() if first in m["tables"]]
        if not held:
            return None
        if len(self.chain) == 1:
            return sum(t["rows"] for t in held)
        return len(rows.chain_ids([(link.path, link.info) for link in self.chain], table))

    # --- the dense state -----------------------------------------------------------------

    @property
    def dense_path(self) -> Path:
        """The index of the trainer's dense state, as its errors name it."""
        return self.path / DENSE / STATE

    def dense_state(self):
        """The trainer's dense state (``dense.load_tree``: model, optimizer...), every file verified
        against the commit before any tensor is read."""
        from cardinal.checkpoint.dense import load_tree  # torch, which a server never imports

        entry = self.info["files"].get(f"{DENSE}/{STATE}")
        if entry is None:
            raise ValueError(f"{self.path / COMMIT} lists no {DENSE}/{STATE}: not a trainer checkpoint")
        return load_tree(self.path / DENSE, entry)
