"""``ShardingPlan``: which servers hold which part of each table.

A plan gives each table one or more pieces. A piece is a range of the table's columns,
spread row-wise over a tuple of servers (an id goes to ``servers[route_hash(id) % len]``):

    row-wise, all servers (today's, the default)   C1   all columns   over (0, 1, 2, 3)
    table-wise                                      C7   all columns   over (2,)
    row-wise over some servers                      C3   all columns   over (1, 3)
    column-wise                                     C5   [0, 64)       over (0,)
                                                         [64, 129)     over (1,)

A table not named in the plan is row-wise over every server, so ``ShardingPlan(n)`` is the
hash plan and stores and checkpoints are exactly as before plans existed. A store holds
each piece of its shard as an ordinary table: a whole-row piece under the table's name, a
column piece under ``<table>-cols<lo>-<hi>`` (its optimizer state alike, cut by the same
columns). A column piece's rows start from the same values as the columns of the whole row
(``TableConfig.first_column``), so with an element-wise optimizer (SGD, Adagrad, Adam, FTRL)
any plan trains the same model; row-wise Adagrad keeps one accumulator a piece, as
TorchRec's column-wise shards do (and one for a wide part's weight, in the piece that holds it).

A table placed on fewer servers than all may also have its hottest ids copied (``Replicas``):
read-only copies of those rows on every server, refreshed by one worker at least every
``staleness`` steps. Worker w reads a table's hot rows from one server, ``(servers[0] + w) %
n_shards``, so the reads of several workers spread over the servers while a table stays whole
on one (one request a step more, at most). Gradients go to the rows' own servers alone, whose
optimizer is the only one that changes them: any optimizer may be used, since a copy is only
ever written by a refresh. A copy older than the bound is not served: the worker reads that
row from its own server then.

The client splits each request by the plan, the store checks each id is its own by it, and
each checkpoint records it: a checkpoint loads into any other plan (``checkpoint/rows.py``).
Copies of hot rows are not saved: a refresh makes them again.
"""

import re
import zlib
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from cardinal.sharding.routing import route as hash_route

_COLS = re.compile(r"(.+)-cols(\d+)-(\d+)")


@dataclass(frozen=True)
class Piece:
    """Columns [lo, hi) of a table's rows (``None``: all of them), row-wise over ``servers``."""

    servers: tuple[int, ...]
    columns: tuple[int, int] | None = None

    def name(self, table: str) -> str:
        """The name of the table that holds this piece on its servers."""
        return table if self.columns is None else f"{table}-cols{self.columns[0]}-{self.columns[1]}"


@dataclass(frozen=True)
class Replicas:
    """A table's hot ``ids``, copied to every server, the copies refreshed at least every
    ``staleness`` steps (a pull of step s reads a copy made at a step >= s - staleness)."""

    ids: tuple[int, ...]
    staleness: int = 4

    def __post_init__(self):
        if not isinstance(self.ids, (tuple, list, np.ndarray)) or len(self.ids) == 0 or \
                not all(_is_int(i) and -2**63 <= i < 2**63 for i in self.ids):
            raise ValueError("replicas: ids must be a non-empty list of int64 ids")
        ids = tuple(sorted({int(i) for i in self.ids}))
        if len(ids) != len(self.ids):
            raise ValueError("replicas: ids must be distinct")
        if not _is_int(self.staleness) or self.staleness < 1:
            raise ValueError(f"replicas: staleness must be an integer >= 1, got {self.staleness!r}")
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "staleness", int(self.staleness))

    @cached_property
    def array(self) -> np.ndarray:
        """The ids, sorted, (k,) int64."""
        return np.asarray(self.ids, np.int64)

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """(n,) bool: which of ``ids`` are copied."""
        at = np.minimum(np.searchsorted(self.array, ids), len(self.array) - 1)
        return self.array[at] == ids


@dataclass(frozen=True)
class ShardingPlan:
    """``tables``: table -> its pieces, in column order; a table not named is row-wise over all.
    ``replicas``: table -> its hot rows copied to every server (a table of one piece)."""

    n_shards: int
    tables: dict[str, tuple[Piece, ...]] = field(default_factory=dict)
    replicas: dict[str, Replicas] = field(default_factory=dict)

    def __post_init__(self):
        if not _is_int(self.n_shards) or self.n_shards < 1:
            raise ValueError(f"a plan needs n_shards >= 1, got {self.n_shards!r}")
        for table, pieces in self.tables.items():
            where = f"plan: table {table!r}"
            if not pieces:
                raise ValueError(f"{where}: no pieces")
            for p in pieces:
                if not p.servers or not all(_is_int(s) and 0 <= s < self.n_shards for s in p.servers) or \
                        len(set(p.servers)) != len(p.servers):  # ints first: a list in servers is unhashable
                    raise ValueError(f"{where}: servers {list(p.servers)} must be distinct shards in [0, {self.n_shards})")
            if len(pieces) == 1:
                if pieces[0].columns is not None:
                    raise ValueError(f"{where}: one piece holds all columns (columns = null)")
                continue
            at = 0
            for p in pieces:
                if p.columns is None or not all(_is_int(c) for c in p.columns) or p.columns[0] != at \
                        or p.columns[1] <= at:
                    raise ValueError(f"{where}: column pieces must cover [0, width) in order, without gaps or "
                                     f"overlap; got {[p.columns for p in pieces]}")
                at = p.columns[1]
        for table, spec in self.replicas.items():
            if not isinstance(spec, Replicas):
                raise TypeError(f"plan: replicas[{table!r}] must be a Replicas, got {type(spec).__name__}")
            if len(self.pieces(table)) > 1:
                raise ValueError(f"plan: table {table!r} is split by columns: its rows cannot be copied whole; "
                                 "place it whole to replicate its hot rows")
            if len(self.pieces(table)[0].servers) == self.n_shards > 1:
                raise ValueError(f"plan: table {table!r} is row-wise over every server, which spreads its hot rows' "
                                 "reads already: copy the hot rows of a table placed on fewer servers")
        object.__setattr__(self, "n_shards", int(self.n_shards))
        object.__setattr__(self, "tables", {  # plain ints (numpy's would not go into JSON), tuples
            t: tuple(Piece(tuple(int(s) for s in p.servers), None if p.columns is None else tuple(map(int, p.columns)))
                     for p in pieces) for t, pieces in self.tables.items()})

    # --- where rows live -------------------------------------------------------------------

    def pieces(self, table: str) -> tuple[Piece, ...]:
        return self.tables.get(table) or (Piece(tuple(range(self.n_shards))),)

    def locate(self, name: str) -> tuple[str, Piece]:
        """(table, piece) of a stored table name: a piece of a named table, else the table whole."""
        m = _COLS.fullmatch(name)
        if m and m.group(1) in self.tables:
            for p in self.tables[m.group(1)]:
                if p.name(m.group(1)) == name:
                    return m.group(1), p
        pieces = self.pieces(name)
        if len(pieces) > 1:
            raise ValueError(f"table {name!r} is split by columns into {self.names([name])}: name one of those")
        return name, pieces[0]

    def route(self, name: str, ids: np.ndarray) -> np.ndarray:
        """The shard of each id (n,) int64 in the stored table ``name``."""
        servers = self.locate(name)[1].servers
        if servers == tuple(range(self.n_shards)):
            return hash_route(ids, self.n_shards)
        if len(servers) == 1:  # table-wise: no hash to compute
            return np.full(len(ids), servers[0], np.int64)
        return np.asarray(servers, np.int64)[hash_route(ids, len(servers))]

    @staticmethod
    def replica_name(table: str) -> str:
        """The name under which every server holds the copies of ``table``'s hot rows."""
        return f"{table}-replica"

    def reader(self, table: str, worker: int) -> int:
        """The server from which ``worker`` reads ``table``'s copied hot rows: each worker one,
        in turn from the table's first server, so W workers spread those reads over min(W, n)
        servers while each sends at most one request a step more."""
        return (self.pieces(table)[0].servers[0] + worker) % self.n_shards

    def read_route(self, table: str, ids: np.ndarray, worker: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(shard, copied) for a training pull by ``worker`` of ``ids`` in a table of one piece:
        the shard to read each id from, and (n,) bool, True where that shard holds a copy rather
        than the row (None: no id is read from a copy)."""
        shards = self.route(table, ids)
        spec = self.replicas.get(table)
        if spec is None or len(ids) == 0:
            return shards, None
        reader = self.reader(table, worker)
        copied = spec.contains(ids) & (shards != reader)  # a hot row the reader holds itself is read there
        if not copied.any():
            return shards, None
        shards[copied] = reader
        return shards, copied

    def names(self, tables, shard: int | None = None) -> list[str]:
        """The stored tables of ``tables`` (logical names) on ``shard`` (every shard: None)."""
        return [p.name(t) for t in tables for p in self.pieces(t) if shard is None or shard in p.servers]

    def is_hash(self) -> bool:
        """Every table row-wise over every server: the layout of checkpoints before plans."""
        return all(self.pieces(t) == (Piece(tuple(range(self.n_shards))),) for t in self.tables)

    # --- stores ----------------------------------------------------------------------------

    def shard_config(self, config, shard: int):
        """The ``StoreConfig`` of shard ``shard``: its pieces, each an ordinary table of its own width."""
        names = {t.name for t in config.tables}
        unknown = sorted((set(self.tables) | set(self.replicas)) - names)
        if unknown:
            raise ValueError(f"the plan places table {unknown[0]!r}, which is not one of {sorted(names)}")
        tables, admission = [], {}
        for t in config.tables:
            pieces = self.pieces(t.name)
            if pieces[-1].columns is not None and pieces[-1].columns[1] != t.dim:
                raise ValueError(f"plan: table {t.name!r} is {t.dim} columns wide, its pieces cover "
                                 f"[0, {pieces[-1].columns[1]})")
            if t.name in self.tables and t.saec is not None:
                raise ValueError(f"plan: table {t.name!r} is clustered (compression.saec.ratio): it can only be "
                                 "row-wise over every server; leave it out of the plan")
            if len(pieces) > 1 and t.chunks > 1:
                raise ValueError(f"plan: table {t.name!r} has chunked rows (compression.fiited.chunks): it cannot be "
                                 "split by columns; place it whole (row-wise or table-wise)")
            for p in pieces:
                if shard not in p.servers:
                    continue
                lo, hi = p.columns or (0, t.dim)
                wide = max(0, hi - max(lo, t.dim - t.wide))  # the wide part's columns in the piece...
                tables.append(replace(t, name=p.name(t.name), dim=hi - lo, first_column=t.first_column + lo,
                                      wide=wide if wide < hi - lo else 0))  # ...a piece of those alone: rows of their own
                if t.name in config.admission:
                    admission[p.name(t.name)] = config.admission[t.name]
        names = [t.name for t in tables] + [self.replica_name(t) for t in self.replicas]
        clash = sorted({n for n in names if names.count(n) > 1} | ({self.replica_name(t) for t in self.replicas} & {
            t.name for t in config.tables}))
        if clash:
            raise ValueError(f"plan: the piece {clash[0]!r} has the name of a table of the job; rename the table")
        return replace(config, tables=tuple(tables), admission=admission,
                       saec={n: s for n, s in config.saec.items() if any(t.name == n for t in tables)})

    # --- files -----------------------------------------------------------------------------

    def to_json(self) -> dict:
        out = {"n_shards": self.n_shards,
               "tables": {t: [{"servers": list(p.servers), "columns": None if p.columns is None else list(p.columns)}
                              for p in pieces] for t, pieces in sorted(self.tables.items())}}
        if self.replicas:  # only when there are copies: plans before them read the same
            out["replicas"] = {t: {"ids": list(r.ids), "staleness": r.staleness} for t, r in sorted(self.replicas.items())}
        return out

    def summary(self) -> dict:
        """``to_json`` with each table's copied ids as their count and crc32: what a server reports
        of its plan (a stats reply's header is small) and a worker compares with its own."""
        out = self.to_json()
        for t, spec in out.get("replicas", {}).items():
            spec["ids"] = {"n": len(spec["ids"]), "crc32": zlib.crc32(self.replicas[t].array.tobytes())}
        return out

    @classmethod
    def from_json(cls, obj, where: str = "plan") -> "ShardingPlan":
        """A plan from ``to_json``'s form; a ValueError naming ``where`` for anything else."""
        try:
            if not isinstance(obj, dict) or set(obj) - {"replicas"} != {"n_shards", "tables"} or \
                    not isinstance(obj["tables"], dict) or not isinstance(obj.get("replicas", {}), dict):
                raise ValueError("must be an object with exactly 'n_shards', 'tables' and, optionally, 'replicas'")
            tables = {}
            for t, pieces in obj["tables"].items():
                if not isinstance(pieces, list) or not all(
                        isinstance(p, dict) and set(p) == {"servers", "columns"} and isinstance(p["servers"], list)
                        and (p["columns"] is None or isinstance(p["columns"], list) and len(p["columns"]) == 2)
                        for p in pieces):
                    raise ValueError(f"table {t!r}: pieces must be a list of {{'servers': [...], 'columns': "
                                     "[lo, hi] or null}")
                tables[t] = tuple(Piece(tuple(p["servers"]), None if p["columns"] is None else tuple(p["columns"]))
                                  for p in pieces)
            replicas = {}
            for t, spec in obj.get("replicas", {}).items():
                if not isinstance(spec, dict) or set(spec) - {"staleness"} != {"ids"} or not isinstance(spec["ids"], list):
                    raise ValueError(f"replicas of {t!r} must be {{'ids': [...], 'staleness': steps}}")
                replicas[t] = Replicas(tuple(spec["ids"]), spec.get("staleness", 4))
            return cls(obj["n_shards"], tables, replicas)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {str(e).removeprefix('plan: ')}") from None


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)
