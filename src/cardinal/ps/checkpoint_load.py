"""Reading a checkpoint back: every byte verified, every claim checked, before any state changes.

A load trusts nothing it reads. In order:

    commit.json       its own crc32; format, routing, sharding plan; shard list == shard-00000-of-N
                      .. (N-1)-of-N
    files it lists    each shard manifest (and dense state.json) by size and crc32
    each manifest     shard, n_shards, step, routing agree with the commit; the tables its plan
                      puts on that shard; a table's dims, widths, row formats and optimizer the
                      same in every shard; file names exactly "<table>.<column>.npy"
    each array        size and crc32 from its manifest; exact dtype and shape (no broadcasting);
                      unique ids, each routing to the shard that saved it by its plan; finite
                      values (decoded)
    admission state   size and crc32; its dtypes and shapes checked by the filter that loads it
    a Saec table      its own files (``embedding/clustered_checkpoint.py``), in the shard count that saved it only
    a delta           its base: an earlier committed checkpoint in the same directory, read the
                      same way (``read_chain``), of the same run, the very commit the delta was
                      saved on (``checkpoint_chain.py``); its deleted ids: unique int64

A delta is loaded as its chain: the full checkpoint at its root, then each delta in order
(its deleted ids removed, its rows put in place of older ones); admission state is the newest's.

Each failure is a ValueError naming the file and what is wrong. Resharding, into any shard
count and any sharding plan (``plan.py``): a store of shard s keeps, from every saved shard
holding a piece of the same columns, the rows whose id routes to s by its plan; with the same
servers for that piece it reads only its own files. A table whose columns were split otherwise
is joined and cut again (``checkpoint_columns.py``). A swapped, renamed or edited file is
caught whichever way it loads.
"""

import re
from pathlib import Path

import numpy as np

from cardinal.durable import check_name, crc32_json, load_array, read_json, verify_file
from cardinal.embedding import clustered_checkpoint, formats
from cardinal.embedding.hashing import ROUTING_NAME
from cardinal.embedding.storage import Columns
from cardinal.ps.checkpoint import (COLUMNS, COMMIT, DELETED, FORMAT_VERSION, MANIFEST, STATE, admission_file,
                                    shard_dir, shard_names)
from cardinal.ps import checkpoint_chain, checkpoint_columns
from cardinal.sharding.plan import ShardingPlan

DTYPES = {"ids": np.dtype(np.int64), "data": np.dtype(np.float32), "count": np.dtype(np.uint32),
          "last_step": np.dtype(np.uint32)}
_TABLE = re.compile(r"[A-Za-z0-9_-]+")


def read_commit(step_path: Path) -> dict:
    """The commit marker, with the files it lists verified and every shard manifest checked:
    {"step", "n_shards", "extra", "files", "manifests": {shard dir name: manifest}}."""
    marker = step_path / COMMIT
    if not marker.is_file():
        raise ValueError(f"{step_path} is not a committed checkpoint: {COMMIT} is missing")
    info = read_json(marker)
    if info.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{marker}: format version {info.get('format_version')!r} is not {FORMAT_VERSION}")
    body = {k: v for k, v in info.items() if k != "crc32"}
    if info.get("crc32") != crc32_json(body):
        raise ValueError(f"{marker}: its crc32 does not match its contents (edited or corrupt)")
    info["sha256"] = checkpoint_chain.digest(info)  # what a delta on this one records (checkpoint_chain.py)
    _expect(marker, info, "kind", "cardinal.commit")
    _expect(marker, info, "routing", ROUTING_NAME)
    step, n = info.get("step"), info.get("n_shards")
    if not _is_int(step) or step < 0 or not _is_int(n) or n < 1:
        raise ValueError(f"{marker}: step {step!r} and n_shards {n!r} must be integers >= 0 and >= 1")
    base = info.get("base")
    if base is not None and not (_is_int(base) and 0 <= base < step):
        raise ValueError(f"{marker}: base {base!r} must be the step of an earlier checkpoint (0 <= base < {step})")
    checkpoint_chain.check_marker(marker, info)
    info["plan"] = ShardingPlan.from_json(info["plan"], f"{marker}: plan") if "plan" in info else ShardingPlan(n)
    if info["plan"].n_shards != n:
        raise ValueError(f"{marker}: its plan is for {info['plan'].n_shards} shards, its n_shards is {n}")
    if info.get("shards") != shard_names(n):
        raise ValueError(f"{marker}: shard list {info.get('shards')!r} is not the {n} shards its n_shards says")
    files = info.get("files")
    manifests = {f"{name}/{MANIFEST}" for name in shard_names(n)}
    if not isinstance(files, dict) or not manifests <= set(files):
        raise ValueError(f"{marker}: 'files' must list every shard manifest ({sorted(manifests)})")
    for rel, entry in files.items():
        parts = rel.split("/") if isinstance(rel, str) else [rel]
        if len(parts) != 2 or (rel not in manifests and parts[1] != STATE):
            raise ValueError(f"{marker}: file {rel!r} is neither a shard manifest nor a <dir>/{STATE}")
        check_name(parts[0], str(marker))
        verify_file(step_path / parts[0] / parts[1], entry)
    if not isinstance(info.get("extra"), dict):
        raise ValueError(f"{marker}: 'extra' must be a JSON object")
    info["manifests"] = {}
    for s, name in enumerate(shard_names(n)):
        path = step_path / name / MANIFEST
        info["manifests"][name] = _check_manifest(path, read_json(path), s, n, step, base)
    _check_same_tables(step_path, list(info["manifests"].values()), info["plan"])
    return info


def read_chain(step_path: Path) -> list[tuple[Path, dict]]:
    """The checkpoints a load of ``step_path`` reads, oldest first: itself when it is full; else
    the full checkpoint its bases lead to, then each delta. Every one is ``read_commit``-checked,
    and each link against the one it applies on (``checkpoint_chain.walk``)."""
    return checkpoint_chain.walk(step_path, read_commit)


def _check_manifest(path: Path, m: dict, shard: int, n_shards: int, step: int, base: int | None = None) -> dict:
    _expect(path, m, "format_version", FORMAT_VERSION)
    _expect(path, m, "kind", "cardinal.shard")
    _expect(path, m, "shard", shard)
    _expect(path, m, "n_shards", n_shards)
    _expect(path, m, "step", step)
    _expect(path, m, "routing", ROUTING_NAME)
    if m.get("base") != base:
        raise ValueError(f"{path}: base is {m.get('base')!r}, its commit marker says {base!r}")
    tables = m.get("tables")
    if not isinstance(tables, dict):
        raise ValueError(f"{path}: 'tables' must be an object")
    for name, t in tables.items():
        where = f"{path}, table {name!r}"
        if not _TABLE.fullmatch(name):
            raise ValueError(f"{where}: not a table name (letters, digits, '_', '-')")
        if not isinstance(t, dict):
            raise ValueError(f"{where}: must be an object")
        for key in ("dim", "width", "rows"):
            if not _is_int(t.get(key)) or t[key] < (0 if key == "rows" else 1):
                raise ValueError(f"{where}: {key} must be a positive integer, got {t.get(key)!r}")
        tail = t.get("chunk_tail", 0)
        if not _is_int(chunks(t)) or chunks(t) < 1 or not _is_int(tail) or tail < 0:
            raise ValueError(f"{where}: chunks must be an integer >= 1 and chunk_tail >= 0, got {t.get('chunks')!r}, "
                             f"{t.get('chunk_tail')!r}")
        if not isinstance(t.get("optimizer"), dict) or not isinstance(t["optimizer"].get("name"), str):
            raise ValueError(f"{where}: 'optimizer' must be an object with a name")
        if storage(t) not in formats.FORMATS:
            raise ValueError(f"{where}: storage must be one of {list(formats.FORMATS)}, got {storage(t)!r}")
        files = t.get("files")
        if clustered_checkpoint.KEY in t:  # a clustered table: its map and cluster rows, never in a delta
            if base is not None:
                raise ValueError(f"{where}: a delta checkpoint cannot hold a clustered (Saec) table")
            clustered_checkpoint.check_meta(where, t)
            columns = clustered_checkpoint.COLUMNS
        else:
            columns = (*COLUMNS, DELETED) if base is not None else COLUMNS
        if not isinstance(files, dict) or set(files) != set(columns):
            raise ValueError(f"{where}: 'files' must hold exactly {list(columns)}")
        for column, entry in files.items():
            expected = re.compile(re.escape(f"{name}.{column}.npy"))
            check_name(entry.get("file") if isinstance(entry, dict) else None, where, expected)
        admission = t.get("admission")
        if admission is not None:
            if not isinstance(admission, dict) or not isinstance(admission.get("policy"), str) \
                    or not isinstance(admission.get("files"), dict):
                raise ValueError(f"{where}: 'admission' must be an object with a policy and files")
            for key, entry in admission["files"].items():
                check_name(key, where)
                expected = re.compile(re.escape(admission_file(name, key)))
                check_name(entry.get("file") if isinstance(entry, dict) else None, where, expected)
    return m


def _check_same_tables(step_path: Path, manifests: list[dict], plan: ShardingPlan) -> None:
    """Each shard holds the tables its plan puts there, and a table is alike wherever it is held."""
    try:
        tables = sorted({plan.locate(name)[0] for m in manifests for name in m["tables"]})
    except ValueError as e:
        raise ValueError(f"checkpoint {step_path.name}: {e}") from None
    if not tables:
        raise ValueError(f"checkpoint {step_path.name}: no shard holds a table")
    first = {}
    for m in manifests:
        where = f"checkpoint {step_path.name}, shard {m['shard']}"
        if sorted(m["tables"]) != sorted(plan.names(tables, m["shard"])):
            raise ValueError(f"{where}: holds tables {sorted(m['tables'])}, its sharding plan puts "
                             f"{sorted(plan.names(tables, m['shard']))} there")
        for name, t in m["tables"].items():
            seen = first.setdefault(name, (m["shard"], t))
            for key in ("dim", "width", "optimizer", "chunks", "chunk_tail"):
                if t.get(key) != seen[1].get(key):
                    raise ValueError(f"{where}: table {name!r} has {key} {t.get(key)!r}, shard {seen[0]} has "
                                     f"{seen[1].get(key)!r}")
            if storage(t) != storage(seen[1]):
                raise ValueError(f"{where}: table {name!r} stores {storage(t)}, shard {seen[0]} {storage(seen[1])}")


def storage(entry: dict) -> str:
    """A saved table's row format (``embedding/formats``); checkpoints from before formats hold fp32."""
    return entry.get("storage", "fp32")


def chunks(entry: dict):
    """A saved table's chunks a row (``embedding/formats/chunked.py``); 1 (whole rows) before chunks."""
    return entry.get("chunks", 1)


def check_compatible(step_path: Path, info: dict, tables: dict, plan: ShardingPlan | None = None,
                     names=None) -> None:
    """The saved tables are exactly the job's, ``names`` (the store's ``tables`` when None), with
    the same dims, optimizer, row format and chunks. The store holds pieces of them by ``plan``
    (the hash plan of one shard when None): a piece saved with the same columns must also have
    the same width; one whose columns were split otherwise must be of a form that can be cut."""
    plan = plan or ShardingPlan(1)
    saved_plan, saved = info["plan"], saved_tables(info)
    where = f"checkpoint {step_path.name}"
    logical = sorted({saved_plan.locate(n)[0] for n in saved})
    if logical != sorted(names if names is not None else tables):
        raise ValueError(f"{where} has tables {logical}, the store has {sorted(names if names is not None else tables)}")
    for name, table in tables.items():
        logical_name, piece = plan.locate(name)
        pieces = saved_plan.pieces(logical_name)
        dim = pieces[-1].columns[1] if pieces[-1].columns else saved[logical_name]["dim"]
        want = plan.pieces(logical_name)[-1].columns[1] if piece.columns else table.dim
        if dim != want:
            raise ValueError(f"{where}: table {logical_name!r} has dim {dim}, the store expects {want}")
        same = [p for p in pieces if p.columns == piece.columns]
        s = saved[(same or pieces)[0].name(logical_name)]
        if not same:
            checkpoint_columns.check_cuttable(where, logical_name, s, table)
        if s["optimizer"]["name"] != table.optimizer.name:
            raise ValueError(f"{where}: table {name!r} was trained with {s['optimizer']['name']!r}, "
                             f"the store uses {table.optimizer.name!r} (their state does not carry over)")
        if storage(s) != table.format.name:
            raise ValueError(f"{where}: table {name!r} stores its values as {storage(s)}, the store as "
                             f"{table.format.name} (rows load in the form they were saved: set the table's "
                             f"embedding.storage to {storage(s)!r})")
        layout = (chunks(s), s.get("chunk_tail", 0))
        if layout != (table.config.chunks, table.config.chunk_tail):
            raise ValueError(f"{where}: table {name!r} was saved with {layout[0]} chunks a row (tail {layout[1]}), "
                             f"the store has {table.config.chunks} (tail {table.config.chunk_tail}): rows load in "
                             f"the layout they were saved in; set embedding.chunks = {layout[0]}")
        if same and s["width"] != table.portable_width:
            raise ValueError(f"{where}: table {name!r} has rows of width {s['width']}, "
                             f"the store's are {table.portable_width} wide")


def saved_tables(info: dict) -> dict:
    """Stored table name -> its manifest entry (the first shard's that holds it)."""
    out = {}
    for m in info["manifests"].values():
        for name, t in m["tables"].items():
            out.setdefault(name, t)
    return out


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
    comes whole, in one block (``checkpoint_columns.py``)."""
    name, saved_plan = table.config.name, info["plan"]
    logical, piece = plan.locate(name)
    same = [p for p in saved_plan.pieces(logical) if p.columns == piece.columns]
    if not same:
        yield from checkpoint_columns.cut(step_path, info, plan, shard, table, _saved_rows)
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
        base = shard_dir(step_path, m["shard"], m["n_shards"])
        cols = _open_table(base, m, name)
        where = base / m["tables"][name]["files"]["ids"]["file"]
        for lo in range(0, len(cols["ids"]), size):
            rows = Columns(*(np.array(cols[c][lo:lo + size]) for c in COLUMNS))
            _check_block(base, m, name, rows, lo, info["plan"])
            yield where, rows


def deleted_ids(step_path: Path, info: dict, plan: ShardingPlan, shard: int, name: str) -> np.ndarray:
    """A delta's ids of the store's table ``name`` deleted since its base, those that route to
    ``shard`` by ``plan``: from every saved piece of its table."""
    logical = plan.locate(name)[0]
    parts = [_read_deleted(shard_dir(step_path, m["shard"], m["n_shards"]), m, p.name(logical))
             for p in info["plan"].pieces(logical) for m in info["manifests"].values() if m["shard"] in p.servers]
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
            base = shard_dir(step_path, m["shard"], m["n_shards"])
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


def _expect(path: Path, obj: dict, key: str, value) -> None:
    if obj.get(key) != value or type(obj.get(key)) is not type(value):
        raise ValueError(f"{path}: {key} is {obj.get(key)!r}, expected {value!r}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
