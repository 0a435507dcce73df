"""Verifying a checkpoint's commit: every claim checked before any row is read.

A load trusts nothing it reads. Here, for each commit of a chain (``Reader``, ``reader.py``):

    commit.json       its own crc32; format, routing, sharding plan; shard list == shard-00000-of-N
                      .. (N-1)-of-N
    files it lists    each shard manifest (and dense state.json) by size and crc32
    each manifest     shard, n_shards, step, routing agree with the commit; the tables its plan
                      puts on that shard; a table's dims, widths, row formats and optimizer the
                      same in every shard; file names exactly "<table>.<column>.npy"
    a Saec table      its manifest entry (``clustered.py``; its files are read in the shard count that
                      saved it only)
    a delta           its run and base well formed (``chain.py``, which checks each link against the
                      commit it applies on when the chain is walked)

and, against the store a checkpoint loads into, that the saved tables are its tables
(``check_compatible``). The arrays are checked as they are read (``rows.py``). Each failure is a
ValueError naming the file and what is wrong.
"""

import copy
import re
from pathlib import Path

from cardinal.checkpoint import chain, clustered
from cardinal.checkpoint.columns import check_cuttable
from cardinal.checkpoint.durable import check_name, crc32_json, read_json, verify_file
from cardinal.checkpoint.layout import (COLUMNS, COMMIT, DELETED, FORMAT_VERSION, MANIFEST, REMOTE, STATE,
                                        admission_file, shard_dir, shard_names)
from cardinal.checkpoint.parts import elsewhere, not_here
from cardinal.embedding import formats
from cardinal.embedding.hashing import ROUTING_NAME
from cardinal.sharding.plan import ShardingPlan

_TABLE = re.compile(r"[A-Za-z0-9_-]+")


def read_commit(step_path: Path, sent: dict | None = None) -> dict:
    """The commit marker, with the files it lists verified and every shard manifest checked:
    {"step", "n_shards", "extra", "files", "manifests": {shard dir name: manifest}, "marker": the
    commit as saved}. ``sent``: the commit as the workers' rank 0 sent it, for a step directory
    that holds none (a server's own disk).

    A shard saved on its server's own disk (``REMOTE``) is checked by the copy of its manifest the
    commit holds; where its files are (on that server) its manifest file is verified too, so a
    server loads only a part that is the one its commit names."""
    marker = step_path / COMMIT
    if sent is None and not marker.is_file():
        raise ValueError(f"{step_path} is not a committed checkpoint: {COMMIT} is missing")
    info = read_json(marker) if sent is None else copy.deepcopy(sent)
    if not isinstance(info, dict):
        raise ValueError(f"{marker} (as sent): must be a JSON object")
    saved = copy.deepcopy(info)
    if info.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{marker}: format version {info.get('format_version')!r} is not {FORMAT_VERSION}")
    body = {k: v for k, v in info.items() if k != "crc32"}
    if info.get("crc32") != crc32_json(body):
        raise ValueError(f"{marker}: its crc32 does not match its contents (edited or corrupt)")
    info["sha256"] = chain.digest(info)  # what a delta on this one records (chain.py)
    _expect(marker, info, "kind", "cardinal.commit")
    _expect(marker, info, "routing", ROUTING_NAME)
    step, n = info.get("step"), info.get("n_shards")
    if not _is_int(step) or step < 0 or not _is_int(n) or n < 1:
        raise ValueError(f"{marker}: step {step!r} and n_shards {n!r} must be integers >= 0 and >= 1")
    base = info.get("base")
    if base is not None and not (_is_int(base) and 0 <= base < step):
        raise ValueError(f"{marker}: base {base!r} must be the step of an earlier checkpoint (0 <= base < {step})")
    chain.check_marker(marker, info)
    info["plan"] = ShardingPlan.from_json(info["plan"], f"{marker}: plan") if "plan" in info else ShardingPlan(n)
    if info["plan"].n_shards != n:
        raise ValueError(f"{marker}: its plan is for {info['plan'].n_shards} shards, its n_shards is {n}")
    if info.get("shards") != shard_names(n):
        raise ValueError(f"{marker}: shard list {info.get('shards')!r} is not the {n} shards its n_shards says")
    remote = _remote(marker, info, n)
    files = info.get("files")
    manifests = {f"{name}/{MANIFEST}" for name in shard_names(n)}
    if not isinstance(files, dict) or not manifests <= set(files):
        raise ValueError(f"{marker}: 'files' must list every shard manifest ({sorted(manifests)})")
    for rel, entry in files.items():
        parts = rel.split("/") if isinstance(rel, str) else [rel]
        if len(parts) != 2 or (rel not in manifests and parts[1] != STATE):
            raise ValueError(f"{marker}: file {rel!r} is neither a shard manifest nor a <dir>/{STATE}")
        check_name(parts[0], str(marker))
        if parts[0] in remote and not (step_path / parts[0]).is_dir():
            continue  # on its server's own disk: checked by the copy the commit holds, and by that server
        if sent is not None and rel not in manifests:
            continue  # the dense state, on the workers' rank 0's disk: a server checks its own part
        verify_file(step_path / parts[0] / parts[1], entry)
    if not isinstance(info.get("extra"), dict):
        raise ValueError(f"{marker}: 'extra' must be a JSON object")
    info["manifests"] = {}
    for s, name in enumerate(shard_names(n)):
        path = step_path / name / MANIFEST
        manifest = remote[name]["manifest"] if name in remote else read_json(path)
        if name in remote and path.is_file() and read_json(path) != manifest:
            raise ValueError(f"{path}: not the manifest its commit holds a copy of (another run's, or edited)")
        info["manifests"][name] = _check_manifest(path, manifest, s, n, step, base)
    _check_same_tables(step_path, list(info["manifests"].values()), info["plan"])
    info["marker"] = saved
    return info


def _remote(marker: Path, info: dict, n_shards: int) -> dict:
    """The commit's shards saved on their server's own disk: shard dir name -> {"server", "manifest"}."""
    remote = info.get(REMOTE, {})
    if not isinstance(remote, dict) or not set(remote) <= set(shard_names(n_shards)) or not all(
            isinstance(r, dict) and isinstance(r.get("server"), str) and isinstance(r.get("manifest"), dict)
            for r in remote.values()):
        raise ValueError(f"{marker}: '{REMOTE}' must map shard directories of its {n_shards} shards to "
                         "{\"server\", \"manifest\"}")
    return remote


def shard_files(step_path: Path, info: dict, shard: int, n_shards: int) -> Path:
    """The directory of a saved shard's files, or a ValueError naming the server that holds them when
    they are on its own disk, not here."""
    server = elsewhere(step_path, info, shard, n_shards)
    if server is not None:
        raise ValueError(not_here(step_path, shard, server))
    return shard_dir(step_path, shard, n_shards)


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
        if clustered.KEY in t:  # a clustered table: its map and cluster rows, never in a delta
            if base is not None:
                raise ValueError(f"{where}: a delta checkpoint cannot hold a clustered (Saec) table")
            clustered.check_meta(where, t)
            columns = clustered.COLUMNS
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
            check_cuttable(where, logical_name, s, table)
        if s["optimizer"]["name"] != table.optimizer.name:
            raise ValueError(f"{where}: table {name!r} was trained with {s['optimizer']['name']!r}, "
                             f"the store uses {table.optimizer.name!r} (their state does not carry over)")
        if storage(s) != table.format.name:
            raise ValueError(f"{where}: table {name!r} stores its values as {storage(s)}, the store as "
                             f"{table.format.name} (rows load in the form they were saved: set the table's "
                             f"compression.storage to {storage(s)!r})")
        layout = (chunks(s), s.get("chunk_tail", 0))
        if layout != (table.config.chunks, table.config.chunk_tail):
            raise ValueError(f"{where}: table {name!r} was saved with {layout[0]} chunks a row (tail {layout[1]}), "
                             f"the store has {table.config.chunks} (tail {table.config.chunk_tail}): rows load in "
                             f"the layout they were saved in; set compression.fiited.chunks = {layout[0]}")
        if same and s["width"] != table.portable_width:
            wide = s["optimizer"].get("wide", 0)
            why = "" if wide == table.optimizer.wide else (
                f" (row-wise Adagrad's state of {wide} wide columns, the store's of {table.optimizer.wide}: a "
                "checkpoint from before a wide part's weight had an accumulator of its own does not load)")
            raise ValueError(f"{where}: table {name!r} has rows of width {s['width']}, "
                             f"the store's are {table.portable_width} wide{why}")


def saved_tables(info: dict) -> dict:
    """Stored table name -> its manifest entry (the first shard's that holds it)."""
    out = {}
    for m in info["manifests"].values():
        for name, t in m["tables"].items():
            out.setdefault(name, t)
    return out


def _expect(path: Path, obj: dict, key: str, value) -> None:
    if obj.get(key) != value or type(obj.get(key)) is not type(value):
        raise ValueError(f"{path}: {key} is {obj.get(key)!r}, expected {value!r}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
