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
"""

from pathlib import Path

import numpy as np

from cardinal.checkpoint import columns
from cardinal.checkpoint.durable import load_array, verify_file
from cardinal.checkpoint.layout import COLUMNS, DELETED
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
        chunks = [rows for _, rows in table_chunks(step_path, info, plan, shard, table)]
        out[name] = {c: np.concatenate([getattr(rows, c) for rows in chunks]) for c in COLUMNS}
    return out


def table_chunks(step_path: Path, info: dict, plan: ShardingPlan, shard: int, table, size: int = 1 << 20):
    """(ids file, ``Columns``) of the rows of the store's table ``table`` (an ``EmbeddingTable``,
    a piece of a job's table by ``plan``) for shard ``shard``, a block of at most ``size`` saved
    rows at a time (a table larger than RAM is never whole in memory); each saved file verified
    and its dtype and shape checked before its first block, each block's ids checked to route to
    the shard that saved them and its values to be finite. Ids unique within a file are checked
    by the table they go into (``import_rows``). A piece whose columns were saved split otherwise
    comes whole, in one block (``columns.py``)."""
    name, saved_plan = table.config.name, info["plan"]
    logical, piece = plan.locate(name)
    same = [p for p in saved_plan.pieces(logical) if p.columns == piece.columns]
    if not same:
        yield from columns.cut(step_path, info, plan, shard, table, _saved_rows)
        return
    own = same[0].servers == piece.servers and saved_plan.n_shards == plan.n_shards  # its own files only
    for where, rows in _saved_rows(step_path, info, logical, same[0], size, shard if own else None):
        if not own:
            keep = plan.route(name, rows.ids) == shard
            rows = Columns(*(c[keep] for c in rows))
        yield where, rows


def _saved_rows(step_path: Path, info: dict, logical: str, piece, size: int = 1 << 20, shard: int | None = None):
    """(ids file, ``Columns``) blocks of the saved piece ``piece`` of table ``logical``, from each
    shard that saved it (only ``shard``'s own files when ``shard`` is not None), each verified."""
    name = piece.name(logical)
    for m in info["manifests"].values():
        if m["shard"] not in piece.servers or shard is not None and m["shard"] != shard:
            continue
        base = shard_files(step_path, info, m["shard"], m["n_shards"])
        cols = _open_table(base, m, name)
        where = base / m["tables"][name]["files"]["ids"]["file"]
        for lo in range(0, len(cols["ids"]), size):
            rows = Columns(*(np.array(cols[c][lo:lo + size]) for c in COLUMNS))
            _check_block(base, m, name, rows, lo, info["plan"])
            yield where, rows


def deleted_ids(step_path: Path, info: dict, plan: ShardingPlan, shard: int, name: str) -> np.ndarray:
    """A delta's ids of the store's table ``name`` deleted since its base, those that route to
    ``shard`` by ``plan``: from every saved piece of its table (its own shard's files only where
    the piece was saved on the same servers: a deleted id routes to the shard that saved it)."""
    logical, piece = plan.locate(name)
    parts = [np.empty(0, np.int64)]
    for p in info["plan"].pieces(logical):
        own = p.servers == piece.servers and info["n_shards"] == plan.n_shards  # its own files only
        parts += [_read_deleted(shard_files(step_path, info, m["shard"], m["n_shards"]), m, p.name(logical))
                  for m in info["manifests"].values() if m["shard"] in p.servers and (not own or m["shard"] == shard)]
    ids = np.unique(np.concatenate(parts))
    return ids[plan.route(name, ids) == shard]


def _read_deleted(base: Path, manifest: dict, name: str) -> np.ndarray:
    entry = manifest["tables"][name]["files"][DELETED]
    path = base / entry["file"]
    verify_file(path, entry)
    ids = np.asarray(load_array(path, mmap=False))
    if ids.dtype != np.int64 or ids.ndim != 1 or len(np.unique(ids)) != len(ids):
        raise ValueError(f"checkpoint file {path}: holds {ids.dtype} {ids.shape}, its manifest needs unique int64 ids")
    return ids


def load_admission(step_path: Path, info: dict, plan: ShardingPlan, shard: int, tables: dict) -> None:
    """Each table's admission filter state, from every shard that saved its first piece (this
    shard's own when that piece had the same servers), each file verified; every piece of a table
    counts the same sightings. A table saved with another policy, or none, starts with an empty
    filter: counters of one kind do not carry over to another."""
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
            base = shard_files(step_path, info, m["shard"], m["n_shards"])
            part = {}
            for key, entry in saved["files"].items():
                verify_file(base / entry["file"], entry)
                part[key] = np.asarray(load_array(base / entry["file"], mmap=False))
            parts.append(part)
        try:
            table.admission.load(parts, lambda ids: plan.route(name, ids) == shard)
        except ValueError as e:
            raise ValueError(f"checkpoint {step_path.name}, table {name!r}: admission state: {e}") from None


def _open_table(base: Path, manifest: dict, name: str) -> dict:
    """One saved shard's columns of table ``name`` (memory-mapped), each file verified first and its
    dtype and shape checked."""
    entry = manifest["tables"][name]
    n, width = entry["rows"], entry["width"]
    shapes = {"ids": (n,), "data": (n, width), "count": (n,), "last_step": (n,)}
    cols = {}
    for c in COLUMNS:
        path = base / entry["files"][c]["file"]
        verify_file(path, entry["files"][c])
        array = load_array(path)
        if array.dtype != DTYPES[c] or array.shape != shapes[c]:
            raise ValueError(f"checkpoint file {path}: holds {array.dtype} {array.shape}, "
                             f"its manifest needs {DTYPES[c]} {shapes[c]}")
        cols[c] = array
    return cols


def _check_block(base: Path, manifest: dict, name: str, rows: Columns, offset: int, plan: ShardingPlan) -> None:
    files = manifest["tables"][name]["files"]
    wrong = np.flatnonzero(plan.route(name, rows.ids) != manifest["shard"])
    if len(wrong):
        raise ValueError(f"checkpoint file {base / files['ids']['file']}: ids (e.g. {rows.ids[wrong[0]]}) do not "
                         f"route to shard {manifest['shard']} of {manifest['n_shards']}, which saved them "
                         f"(a file from another shard?)")
    entry = manifest["tables"][name]
    bad = formats.get(storage(entry)).first_nonfinite(rows.data, np.arange(len(rows.ids)), 0, len(rows.ids),
                                                      entry["dim"])
    if bad >= 0:
        raise ValueError(f"checkpoint file {base / files['data']['file']}: row {offset + bad} "
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
