"""Reading a checkpoint back: every byte verified, every claim checked, before any state changes.

A load trusts nothing it reads. In order:

    commit.json       its own crc32; format, routing; shard list == shard-00000-of-N .. (N-1)-of-N
    files it lists    each shard manifest (and dense state.json) by size and crc32
    each manifest     shard, n_shards, step, routing agree with the commit; same tables, dims,
                      widths, row formats and optimizer in every shard; file names exactly
                      "<table>.<column>.npy"
    each array        size and crc32 from its manifest; exact dtype and shape (no broadcasting);
                      unique ids, each routing to the shard that saved it; finite values (decoded)
    admission state   size and crc32; its dtypes and shapes checked by the filter that loads it
    a Saec table      its own files (``checkpoint_saec.py``), in the shard count that saved it only
    a delta           its base: an earlier committed checkpoint in the same directory, read the
                      same way (``read_chain``); its deleted ids: unique int64

A delta is loaded as its chain: the full checkpoint at its root, then each delta in order
(its deleted ids removed, its rows put in place of older ones); admission state is the newest's.

Each failure is a ValueError naming the file and what is wrong. Resharding: a store of
shard s of N keeps, from every saved shard, the rows whose id routes to s under N
(``routing.route``); with the same N it reads only its own files. A swapped, renamed or
edited file is caught whichever way it loads.
"""

import re
from pathlib import Path

import numpy as np

from cardinal.durable import check_name, crc32_json, load_array, read_json, verify_file
from cardinal.embedding import formats
from cardinal.embedding.hashing import ROUTING_NAME
from cardinal.embedding.storage import Columns
from cardinal.ps.checkpoint import (COLUMNS, COMMIT, DELETED, FORMAT_VERSION, MANIFEST, STATE, admission_file,
                                    shard_dir, shard_names, step_dir)
from cardinal.ps import checkpoint_saec
from cardinal.ps.routing import route

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
    _expect(marker, info, "kind", "cardinal.commit")
    _expect(marker, info, "routing", ROUTING_NAME)
    step, n = info.get("step"), info.get("n_shards")
    if not _is_int(step) or step < 0 or not _is_int(n) or n < 1:
        raise ValueError(f"{marker}: step {step!r} and n_shards {n!r} must be integers >= 0 and >= 1")
    base = info.get("base")
    if base is not None and not (_is_int(base) and 0 <= base < step):
        raise ValueError(f"{marker}: base {base!r} must be the step of an earlier checkpoint (0 <= base < {step})")
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
    _check_same_tables(step_path, list(info["manifests"].values()))
    return info


def read_chain(step_path: Path) -> list[tuple[Path, dict]]:
    """The checkpoints a load of ``step_path`` reads, oldest first: itself when it is full; else
    the full checkpoint its bases lead to, then each delta. Every one is ``read_commit``-checked."""
    chain = [(step_path, read_commit(step_path))]
    while (base := chain[-1][1].get("base")) is not None:
        path = step_dir(step_path.parent, base)
        if not (path / COMMIT).is_file():
            raise ValueError(f"{chain[-1][0]} is a delta on step {base}, whose committed checkpoint {path} is missing")
        chain.append((path, read_commit(path)))
    return chain[::-1]


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
    if not isinstance(tables, dict) or not tables:
        raise ValueError(f"{path}: 'tables' must be a non-empty object")
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
        if "saec" in t:  # a clustered table: its map and cluster rows, never in a delta
            if base is not None:
                raise ValueError(f"{where}: a delta checkpoint cannot hold a clustered (Saec) table")
            checkpoint_saec.check_meta(where, t)
            columns = checkpoint_saec.COLUMNS
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


def _check_same_tables(step_path: Path, manifests: list[dict]) -> None:
    first = manifests[0]["tables"]
    for m in manifests[1:]:
        where = f"checkpoint {step_path.name}, shard {m['shard']}"
        if set(m["tables"]) != set(first):
            raise ValueError(f"{where}: tables {sorted(m['tables'])} differ from shard 0's {sorted(first)}")
        for name, t in m["tables"].items():
            for key in ("dim", "width", "optimizer", "chunks", "chunk_tail"):
                if t.get(key) != first[name].get(key):
                    raise ValueError(f"{where}: table {name!r} has {key} {t.get(key)!r}, shard 0 has "
                                     f"{first[name].get(key)!r}")
            if storage(t) != storage(first[name]):
                raise ValueError(f"{where}: table {name!r} stores {storage(t)}, shard 0 {storage(first[name])}")


def storage(entry: dict) -> str:
    """A saved table's row format (``embedding/formats``); checkpoints from before formats hold fp32."""
    return entry.get("storage", "fp32")


def chunks(entry: dict):
    """A saved table's chunks a row (``embedding/formats/chunked.py``); 1 (whole rows) before chunks."""
    return entry.get("chunks", 1)


def check_compatible(step_path: Path, info: dict, tables: dict) -> None:
    """The saved tables are exactly the store's (names, dims, widths, optimizer, row format and chunks)."""
    saved = next(iter(info["manifests"].values()))["tables"]
    where = f"checkpoint {step_path.name}"
    if set(saved) != set(tables):
        raise ValueError(f"{where} has tables {sorted(saved)}, the store has {sorted(tables)}")
    for name, table in tables.items():
        s = saved[name]
        if s["dim"] != table.dim:
            raise ValueError(f"{where}: table {name!r} has dim {s['dim']}, the store expects {table.dim}")
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
        if s["width"] != table.portable_width:
            raise ValueError(f"{where}: table {name!r} has rows of width {s['width']}, "
                             f"the store's are {table.portable_width} wide")


def load_shard_rows(step_path: Path, info: dict, shard: int, n_shards: int, tables: dict) -> dict:
    """Rows for shard ``shard`` of ``n_shards``, whole: {table: {column: array}} (``table_chunks``,
    concatenated: for tables that fit in memory). ``tables``: name -> EmbeddingTable."""
    check_compatible(step_path, info, tables)
    out = {}
    for name in tables:
        chunks = [rows for _, rows in table_chunks(step_path, info, shard, n_shards, name)]
        out[name] = {c: np.concatenate([getattr(rows, c) for rows in chunks]) for c in COLUMNS}
    return out


def table_chunks(step_path: Path, info: dict, shard: int, n_shards: int, name: str, size: int = 1 << 20):
    """(ids file, ``Columns``) of the rows of table ``name`` for shard ``shard`` of ``n_shards``, a
    block of at most ``size`` saved rows at a time (a table larger than RAM is never whole in
    memory); each saved file verified and its dtype and shape checked before its first block, each
    block's ids checked to route to the shard that saved them and its values to be finite. Ids
    unique within a file are checked by the table they go into (``import_rows``)."""
    same_layout = info["n_shards"] == n_shards
    for m in info["manifests"].values():
        if same_layout and m["shard"] != shard:
            continue
        base = shard_dir(step_path, m["shard"], m["n_shards"])
        cols = _open_table(base, m, name)
        where = base / m["tables"][name]["files"]["ids"]["file"]
        for lo in range(0, len(cols["ids"]), size):
            rows = Columns(*(np.array(cols[c][lo:lo + size]) for c in COLUMNS))
            _check_block(base, m, name, rows, lo)
            if not same_layout:
                keep = route(rows.ids, n_shards) == shard
                rows = Columns(*(c[keep] for c in rows))
            yield where, rows


def deleted_ids(step_path: Path, info: dict, shard: int, n_shards: int, name: str) -> np.ndarray:
    """A delta's ids of table ``name`` deleted since its base, those that route to ``shard``."""
    ids = np.concatenate([_read_deleted(shard_dir(step_path, m["shard"], m["n_shards"]), m, name)
                          for m in info["manifests"].values()])
    return ids[route(ids, n_shards) == shard]


def _read_deleted(base: Path, manifest: dict, name: str) -> np.ndarray:
    entry = manifest["tables"][name]["files"][DELETED]
    path = base / entry["file"]
    verify_file(path, entry)
    ids = np.asarray(load_array(path, mmap=False))
    if ids.dtype != np.int64 or ids.ndim != 1 or len(np.unique(ids)) != len(ids):
        raise ValueError(f"checkpoint file {path}: holds {ids.dtype} {ids.shape}, its manifest needs unique int64 ids")
    return ids


def load_admission(step_path: Path, info: dict, shard: int, n_shards: int, tables: dict) -> None:
    """Each table's admission filter state, from every saved shard (this shard's own when the
    shard count is unchanged), each file verified. A table saved with another policy, or none,
    starts with an empty filter: counters of one kind do not carry over to another."""
    same_layout = info["n_shards"] == n_shards
    for name, table in tables.items():
        if table.admission is None:
            continue
        parts = []
        for m in info["manifests"].values():
            if same_layout and m["shard"] != shard:
                continue
            saved = m["tables"][name].get("admission")
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
            table.admission.load(parts, lambda ids: route(ids, n_shards) == shard)
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


def _check_block(base: Path, manifest: dict, name: str, rows: Columns, offset: int) -> None:
    files = manifest["tables"][name]["files"]
    wrong = np.flatnonzero(route(rows.ids, manifest["n_shards"]) != manifest["shard"])
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
