"""Reading a verified checkpoint's rows: each array checked as it is read, into any shard count and plan.

    each array        size and crc32 from its manifest; exact dtype and shape (no broadcasting);
                      unique ids, each routing to the shard that saved it by its plan; finite
                      values (decoded)
    admission state   size and crc32; its dtypes and shapes checked by the filter that loads it
    a delta's         deleted ids: unique int64

Resharding, into any shard count and any sharding plan (``sharding/plan.py``): a store of shard s
keeps, from every saved shard holding a piece of the same columns, the rows whose id routes to s
by its plan; with the same servers for that piece it reads only its own files. A table whose
columns were split otherwise is joined and cut again (``columns.py``). A swapped, renamed or
edited file is caught whichever way it loads. The commit these read is verified first
(``verify.py``); they are read through ``Reader`` (``reader.py``).

A saved shard whose files are on its server's own disk, not here, is asked for (``parts.py``): the
readers are generators that yield a ``Need`` for each range of it, in the blocks a read here would
make, and ``answer`` is what the server holding it sends back, checked there as a read here checks
and checked again here (dtypes, shapes, routing, finite values) before a store takes it.
"""

import math
from pathlib import Path

import numpy as np

from cardinal.checkpoint import columns
from cardinal.checkpoint.durable import load_array, verify_file
from cardinal.checkpoint.layout import COLUMNS, DELETED, shard_dir
from cardinal.checkpoint.parts import Need, Part, ask, elsewhere, here
from cardinal.checkpoint.verify import check_compatible, shard_files, storage
from cardinal.embedding import formats
from cardinal.embedding.storage import Columns
from cardinal.sharding.plan import ShardingPlan

DTYPES = {"ids": np.dtype(np.int64), "data": np.dtype(np.float32), "count": np.dtype(np.uint32),
          "last_step": np.dtype(np.uint32)}


def load_shard_rows(step_path: Path, info: dict, plan: ShardingPlan, shard: int, tables: dict) -> dict:
    """Rows for shard ``shard`` of ``plan``, whole: {table: {column: array}} (``table_chunks``,
    concatenated: for tables that fit in memory). ``tables``: name -> EmbeddingTable."""
    check_compatible(step_path, info, tables, plan, {plan.locate(n)[0] for n in tables})
    out = {}
    for name, table in tables.items():
        chunks = [rows for _, rows in here(table_chunks(step_path, info, plan, shard, table), step_path, info)]
        out[name] = {c: np.concatenate([getattr(rows, c) for rows in chunks]) for c in COLUMNS}
    return out


def table_chunks(step_path: Path, info: dict, plan: ShardingPlan, shard: int, table, size: int = 1 << 20):
    """(where, ``Columns``) of the rows of the store's table ``table`` (an ``EmbeddingTable``,
    a piece of a job's table by ``plan``) for shard ``shard``, a block of at most ``size`` saved
    rows at a time (a table larger than RAM is never whole in memory); each saved file verified
    and its dtype and shape checked before its first block, each block's ids checked to route to
    the shard that saved them and its values to be finite. Ids unique within a file are checked
    by the table they go into (``import_rows``). A piece whose columns were saved split otherwise
    comes whole, in one block (``columns.py``). A part on another server's disk: a ``Need`` for
    each range of each block, answered with a ``Part`` (``parts.py``)."""
    name, saved_plan = table.config.name, info["plan"]
    logical, piece = plan.locate(name)
    same = [p for p in saved_plan.pieces(logical) if p.columns == piece.columns]

    def read(saved, own=False):
        return _saved_rows(step_path, info, logical, saved, plan, name, shard, own, size)
    if not same:
        yield from columns.cut(step_path, info, plan, shard, table, read)
        return
    yield from read(same[0], own=same[0].servers == piece.servers and saved_plan.n_shards == plan.n_shards)


def _saved_rows(step_path: Path, info: dict, logical: str, piece, plan: ShardingPlan, into: str, to: int,
                own: bool, size: int):
    """(where, ``Columns``) blocks of the saved piece ``piece`` of table ``logical`` for shard ``to``
    of ``plan`` (its table ``into``): from each shard that saved it, each block verified, the rows
    that route to ``to``; with ``own`` (the same servers, the same count) shard ``to``'s own whole."""
    name = piece.name(logical)
    for m in info["manifests"].values():
        if m["shard"] not in piece.servers or own and m["shard"] != to:
            continue
        server = elsewhere(step_path, info, m["shard"], m["n_shards"])
        if server is not None:
            yield from _asked_rows(info, m, name, plan, into, to, size, server)
            continue
        base = shard_dir(step_path, m["shard"], m["n_shards"])
        cols = _open_table(base, m, name)
        files = m["tables"][name]["files"]
        where = base / files["ids"]["file"]
        for lo in range(0, len(cols["ids"]), size):
            rows = Columns(*(np.array(cols[c][lo:lo + size]) for c in COLUMNS))
            _check_block(lambda c: base / files[c]["file"], m, name, rows, lo, info["plan"])
            if not own:
                keep = plan.route(into, rows.ids) == to
                rows = Columns(*(c[keep] for c in rows))
            yield where, rows


def _asked_rows(info: dict, m: dict, name: str, plan: ShardingPlan, into: str, to: int, size: int, server: str):
    """The blocks of a saved shard on ``server``'s disk, as ``_saved_rows`` makes them here: its rows
    of shard ``to``, asked for a block at a time, each checked again here."""
    entry = m["tables"][name]
    files, n = entry["files"], entry["rows"]

    def at(column):
        return f"{files[column]['file']} of shard {m['shard']} (on {server})"
    for lo in range(0, n, size):
        got = yield from ask(Need(info["step"], m["shard"], name, into, "rows", lo, min(lo + size, n)))
        rows = _columns(got, entry, at("ids"))
        _check_block(at, m, name, rows, lo, info["plan"])
        wrong = np.flatnonzero(plan.route(into, rows.ids) != to)
        if len(wrong):
            raise ValueError(f"{at('ids')}: sent ids (e.g. {rows.ids[wrong[0]]}) that are not shard {to}'s")
        yield at("ids"), rows


def deleted_ids(step_path: Path, info: dict, plan: ShardingPlan, shard: int, name: str):
    """A delta's ids of the store's table ``name`` deleted since its base, those that route to
    ``shard`` by ``plan``: from every saved piece of its table (its own shard's files only where
    the piece was saved on the same servers: a deleted id routes to the shard that saved it). A
    generator that returns them (``ids = yield from deleted_ids(...)``), asking for a part on
    another server's disk."""
    logical, piece = plan.locate(name)
    parts = [np.empty(0, np.int64)]
    for p in info["plan"].pieces(logical):
        own = p.servers == piece.servers and info["n_shards"] == plan.n_shards  # its own files only
        for m in info["manifests"].values():
            if m["shard"] not in p.servers or own and m["shard"] != shard:
                continue
            server = elsewhere(step_path, info, m["shard"], m["n_shards"])
            if server is None:
                parts.append(_read_deleted(shard_dir(step_path, m["shard"], m["n_shards"]), m, p.name(logical)))
                continue
            got = yield from ask(Need(info["step"], m["shard"], p.name(logical), name, "deleted", 0, None))
            parts.append(_unique_ids(got.get("ids"), f"deleted ids of {p.name(logical)} of shard {m['shard']} "
                                                     f"(on {server})"))
    ids = np.unique(np.concatenate(parts))
    return ids[plan.route(name, ids) == shard]


def _read_deleted(base: Path, manifest: dict, name: str, verified: set | None = None) -> np.ndarray:
    entry = manifest["tables"][name]["files"][DELETED]
    path = base / entry["file"]
    _verify(path, entry, verified)
    return _unique_ids(np.asarray(load_array(path, mmap=False)), f"checkpoint file {path}")


def _unique_ids(ids, where: str) -> np.ndarray:
    if not isinstance(ids, np.ndarray) or ids.dtype != np.int64 or ids.ndim != 1 or len(np.unique(ids)) != len(ids):
        raise ValueError(f"{where}: holds {getattr(ids, 'dtype', None)} {getattr(ids, 'shape', None)}, "
                         "its manifest needs unique int64 ids")
    return ids


def load_admission(step_path: Path, info: dict, plan: ShardingPlan, shard: int, tables: dict):
    """Each table's admission filter state, from every shard that saved its first piece (this
    shard's own when that piece had the same servers), each file verified; every piece of a table
    counts the same sightings. A table saved with another policy, or none, starts with an empty
    filter: counters of one kind do not carry over to another. A generator (``yield from``),
    asking for a part on another server's disk: its state comes whole, the filter keeps its own."""
    for name, table in tables.items():
        if table.admission is None:
            continue
        logical, piece = plan.locate(name)
        source = info["plan"].pieces(logical)[0]
        own = source.servers == piece.servers and info["n_shards"] == plan.n_shards
        parts = []
        for m in info["manifests"].values():
            if m["shard"] not in source.servers or own and m["shard"] != shard:
                continue
            saved = m["tables"][source.name(logical)].get("admission")
            if saved is None or saved["policy"] != table.admission.name:
                parts = []
                break
            server = elsewhere(step_path, info, m["shard"], m["n_shards"])
            if server is None:
                parts.append(_read_admission(shard_dir(step_path, m["shard"], m["n_shards"]), saved))
                continue
            part = yield from ask(Need(info["step"], m["shard"], source.name(logical), name, "admission", 0, None))
            if set(part) != set(saved["files"]):
                raise ValueError(f"admission state of {source.name(logical)} of shard {m['shard']} (on {server}): "
                                 f"sent {sorted(part)}, its manifest holds {sorted(saved['files'])}")
            parts.append(part)
        try:
            table.admission.load(parts, lambda ids: plan.route(name, ids) == shard)
        except ValueError as e:
            raise ValueError(f"checkpoint {step_path.name}, table {name!r}: admission state: {e}") from None


def _read_admission(base: Path, saved: dict, verified: set | None = None) -> dict:
    part = {}
    for key, entry in saved["files"].items():
        _verify(base / entry["file"], entry, verified)
        part[key] = np.asarray(load_array(base / entry["file"], mmap=False))
    return part


def answer(step_path: Path, info: dict, need: Need, plan: ShardingPlan, to: int, max_bytes: int | None = None,
           verified: set | None = None) -> Part:
    """What the server holding a saved shard on its disk sends for ``need``: the rows of its range
    that fit ``max_bytes`` (one at least), each file verified against the commit (once: ``verified``
    remembers the files verified as they are), rows checked as a read here checks them and only
    those of shard ``to`` of ``plan`` (its table ``need.into``) kept, deleted ids likewise;
    admission state whole."""
    base = shard_dir(step_path, need.part, info["n_shards"])
    if need.part >= info["n_shards"] or not base.is_dir():
        raise ValueError(f"checkpoint {step_path.name}: shard {need.part}'s files are not on this server's disk")
    m = info["manifests"][base.name]
    entry = m["tables"].get(need.table)
    plan.locate(need.into)  # a table of the plan, or a ValueError
    if entry is None or (need.kind == "deleted" and DELETED not in entry["files"]) \
            or (need.kind == "admission" and "admission" not in entry):
        raise ValueError(f"checkpoint {step_path.name}: shard {need.part} saved no {need.kind} of table "
                         f"{need.table!r}")
    if need.kind == "rows":
        cols = _open_table(base, m, need.table, verified)
    elif need.kind == "deleted":
        cols = {"ids": _read_deleted(base, m, need.table, verified)}
    else:
        cols = _read_admission(base, entry["admission"], verified)
    total = len(next(iter(cols.values()))) if cols else 0
    if any(len(a) != total for a in cols.values()) or need.lo > (hi := total if need.hi is None else need.hi) \
            or hi > total:
        raise ValueError(f"checkpoint {step_path.name}, shard {need.part}, table {need.table!r}: rows "
                         f"{need.lo}..{need.hi} of {need.kind} asked for, it holds {total}")
    row = sum(a.itemsize * math.prod(a.shape[1:]) for a in cols.values()) or 1
    end = hi if max_bytes is None else min(hi, need.lo + max(1, max_bytes // row))
    arrays = {k: np.array(a[need.lo:end]) for k, a in cols.items()}
    if need.kind == "rows":
        _check_block(lambda c: base / entry["files"][c]["file"], m, need.table, Columns(**arrays), need.lo,
                     info["plan"])
    if need.kind != "admission":
        keep = plan.route(need.into, arrays["ids"]) == to
        arrays = {k: a[keep] for k, a in arrays.items()}
    return Part(end, total, arrays)


def _verify(path: Path, entry: dict, verified: set | None) -> None:
    """``verify_file``, once for a file as it is (``verified``: what was, by path, inode, size and time)."""
    if verified is None:
        return verify_file(path, entry)
    try:
        st = path.stat()
        key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, repr(entry))
    except OSError:
        key = None
    if key is None or key not in verified:
        verify_file(path, entry)
        verified.add(key)


def _open_table(base: Path, manifest: dict, name: str, verified: set | None = None) -> dict:
    """One saved shard's columns of table ``name`` (memory-mapped), each file verified first and its
    dtype and shape checked."""
    entry = manifest["tables"][name]
    n, width = entry["rows"], entry["width"]
    shapes = {"ids": (n,), "data": (n, width), "count": (n,), "last_step": (n,)}
    cols = {}
    for c in COLUMNS:
        path = base / entry["files"][c]["file"]
        _verify(path, entry["files"][c], verified)
        array = load_array(path)
        if array.dtype != DTYPES[c] or array.shape != shapes[c]:
            raise ValueError(f"checkpoint file {path}: holds {array.dtype} {array.shape}, "
                             f"its manifest needs {DTYPES[c]} {shapes[c]}")
        cols[c] = array
    return cols


def _columns(arrays: dict, entry: dict, where: str) -> Columns:
    """Rows sent by a part's holder, as ``Columns``: the four columns, of their dtypes, of one length."""
    n = len(arrays.get("ids", ()))
    shapes = {"ids": (n,), "data": (n, entry["width"]), "count": (n,), "last_step": (n,)}
    if set(arrays) != set(COLUMNS) or any(arrays[c].dtype != DTYPES[c] or arrays[c].shape != shapes[c]
                                          for c in COLUMNS):
        raise ValueError(f"{where}: sent {[(k, a.dtype.name, a.shape) for k, a in arrays.items()]}, rows need "
                         f"{[(c, DTYPES[c].name, shapes[c]) for c in COLUMNS]}")
    return Columns(*(arrays[c] for c in COLUMNS))


def _check_block(at, manifest: dict, name: str, rows: Columns, offset: int, plan: ShardingPlan) -> None:
    """A block's ids route to the shard that saved them and its values are finite; ``at(column)``:
    where its file is, as an error names it."""
    wrong = np.flatnonzero(plan.route(name, rows.ids) != manifest["shard"])
    if len(wrong):
        raise ValueError(f"checkpoint file {at('ids')}: ids (e.g. {rows.ids[wrong[0]]}) do not "
                         f"route to shard {manifest['shard']} of {manifest['n_shards']}, which saved them "
                         f"(a file from another shard?)")
    entry = manifest["tables"][name]
    bad = formats.get(storage(entry)).first_nonfinite(rows.data, np.arange(len(rows.ids)), 0, len(rows.ids),
                                                      entry["dim"])
    if bad >= 0:
        raise ValueError(f"checkpoint file {at('data')}: row {offset + bad} "
                         f"(id {rows.ids[bad]}) holds NaN or Inf")


def chain_ids(chain: list[tuple[Path, dict]], table: str) -> np.ndarray:
    """The ids of the job's table ``table`` after loading a delta chain [(step dir, commit info)], the
    full checkpoint first: each delta's deleted ids out, its rows' ids in (the first piece's: every
    piece holds the same ids). Only the ids files are read, unverified: a count, not a load."""
    ids = np.empty(0, np.int64)
    for path, info in chain:
        name = info["plan"].pieces(table)[0].name(table)
        saved, deleted = [ids[:0]], [ids[:0]]
        for m in info["manifests"].values():
            if name in m["tables"]:
                files, base = m["tables"][name]["files"], shard_files(path, info, m["shard"], m["n_shards"])
                saved.append(np.asarray(load_array(base / files["ids"]["file"])))
                if DELETED in files:
                    deleted.append(np.asarray(load_array(base / files[DELETED]["file"])))
        ids = np.union1d(np.setdiff1d(ids, np.concatenate(deleted)), np.concatenate(saved))
    return ids
