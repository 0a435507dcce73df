"""Writing a checkpoint: each shard its files and manifest, then one commit marker over them all.

A save writes each file, fsyncs it and its directory, writes the shard manifest, then
(once every shard is written) the commit marker; only then are older checkpoints removed
(``retention.py``). A crash at any point leaves the previous committed checkpoint whole, and an
uncommitted directory is never loaded. The names and places of the files are ``layout.py``'s.

A delta checkpoint (``base`` = the step of the checkpoint it applies on, ``base_sha256`` = the digest
of that one's commit, ``run`` = the run's id: ``chain.py``) holds only the rows pulled or pushed
after that step, plus ``<table>.deleted.npy``, the ids deleted since; it is loaded as its chain,
the full checkpoint at its root then every delta in order (``reader.py``). Arrays are ``.npy``
read with ``allow_pickle=False``; manifests are JSON (``durable.py``).
"""

import json
import shutil
from pathlib import Path

import numpy as np

from cardinal.checkpoint import chain
from cardinal.checkpoint.durable import (ArrayWriter, bytes_entry, crc32_json, file_entry, read_json, write_array,
                                         write_json)
from cardinal.checkpoint.layout import (COLUMNS, COMMIT, DELETED, FORMAT_VERSION, MANIFEST, REMOTE, STATE,
                                        admission_file, shard_dir, shard_names, step_dir)
from cardinal.embedding.hashing import ROUTING_NAME
from cardinal.failpoints import failpoint


def save_shard(step_path: Path, shard: int, n_shards: int, step: int, tables: dict, snapshots: dict,
               base: int | None = None, *, chunk_bytes: int) -> dict:
    """Write one shard's tables (name -> ``Table``, ``embedding/protocol.py``, their locks held; ``snapshots``:
    name -> ``Table.snapshot``, what to write) and its manifest; returns the manifest. With ``base`` the
    snapshots hold the rows changed since that step, and the deleted ids are written. A full checkpoint
    streams each table's rows ``chunk_bytes`` at a time (the server's ``SAVE_CHUNK_BYTES``)."""
    out = shard_dir(step_path, shard, n_shards)
    if out.exists():
        shutil.rmtree(out)  # left by a crashed save of this step: it was never committed
    out.mkdir(parents=True)
    manifest = {"format_version": FORMAT_VERSION, "kind": "cardinal.shard", "shard": shard,
                "n_shards": n_shards, "routing": ROUTING_NAME, "step": step, "tables": {}}
    if base is not None:
        manifest["base"] = base
    for name, table in tables.items():
        snap = snapshots[name]
        own, extra = _write_own(out, name, table), {}
        if own is not None:  # files of its own (a Saec table's map and cluster rows: full checkpoints only)
            (files, extra), n = own, len(table)
        elif snap["rows"] is None:  # a full checkpoint: streamed, block by block, from every tier
            files, n = _write_chunks(out, name, table, chunk_bytes), len(table)
        else:
            files, n = {}, len(snap["rows"]["ids"])
            for column in COLUMNS:
                files[column] = write_array(out / f"{name}.{column}.npy", snap["rows"][column])
                failpoint("save.shard_file_written")
        if base is not None:
            files[DELETED] = write_array(out / f"{name}.{DELETED}.npy", snap["deleted"])
        manifest["tables"][name] = {"dim": table.dim, "width": table.portable_width, "storage": table.format.name,
                                    "chunks": table.config.chunks, "chunk_tail": table.config.chunk_tail, "rows": n,
                                    "init_scale": table.config.init_scale, "seed": table.config.seed,
                                    "optimizer": table.optimizer.describe(), "files": files}
        manifest["tables"][name].update(extra)
        if snap["admission"] is not None:
            describe, state = snap["admission"]
            files = {key: write_array(out / admission_file(name, key), array) for key, array in state.items()}
            manifest["tables"][name]["admission"] = {**describe, "files": files}
    failpoint("save.before_shard_manifest")
    write_json(out / MANIFEST, manifest)
    return manifest


def _write_own(out: Path, name: str, table) -> tuple[dict, dict] | None:
    """(files, manifest keys besides every table's) of a table saved in files of its own
    (``Table.checkpoint_files``, its lock held by the caller); None for a table saved as rows."""
    own = table.checkpoint_files()
    if own is None:
        return None
    arrays, extra = own
    files = {}
    for column, array in arrays.items():
        files[column] = write_array(out / f"{name}.{column}.npy", array)
        failpoint("save.shard_file_written")
    return files, extra


def _write_chunks(out: Path, name: str, table, chunk_bytes: int) -> dict:
    """A table's four column files, written from ``table.row_chunks()`` (its lock held by the caller)."""
    n, width = len(table), table.portable_width
    shapes = {"ids": ((n,), np.int64), "data": ((n, width), np.float32), "count": ((n,), np.uint32),
              "last_step": ((n,), np.uint32)}
    writers = {c: ArrayWriter(out / f"{name}.{c}.npy", dtype, shape) for c, (shape, dtype) in shapes.items()}
    for chunk in table.row_chunks(max(1, chunk_bytes // (4 * width + 16))):  # a bounded copy at a time
        for column in COLUMNS:
            writers[column].write(getattr(chunk, column))
    files = {}
    for column in COLUMNS:
        files[column] = writers[column].close()
        failpoint("save.shard_file_written")
    return files


def commit(step_path: Path, step: int, n_shards: int, extra: dict | None = None, base: int | None = None,
           plan: dict | None = None, run: dict | None = None, base_sha256: str | None = None,
           remote: dict[int, tuple[str, bytes]] | None = None) -> str:
    """Write the commit marker after checking that every shard's manifest is in place.

    The marker lists every other top-level file of the checkpoint with its size and crc32:
    each shard's manifest and any ``<dir>/state.json`` written beside them (the trainer's
    dense state), and carries the crc32 of its own canonical JSON, so that no file of a
    committed checkpoint can be edited unnoticed. ``plan``: the sharding plan the shards were
    saved in (``ShardingPlan.to_json``; recorded unless it is the hash plan, ``sharding/plan.py``).
    ``run``: {"id", "full_every"} of the run saving it; a delta records ``base_sha256``, the digest
    of the commit it was saved on (read from its directory when None: ``chain.py``).
    ``remote``: shard -> (server, manifest bytes) of the shards whose files are on their server's own
    disk, not under ``step_path``: the marker lists each such manifest by the bytes the server sent
    and holds a copy of it, so the checkpoint is checked here and each server checks its own part
    against the marker when it loads (``verify.py``). Returns this commit's digest.
    """
    files, held, remote = {}, {}, remote or {}
    for s in range(n_shards):
        path = shard_dir(step_path, s, n_shards) / MANIFEST
        if s in remote:
            server, data = remote[s]
            files[f"{path.parent.name}/{MANIFEST}"] = bytes_entry(data)
            held[path.parent.name] = {"server": server, "manifest": json.loads(data)}
            continue
        if not path.exists():
            raise RuntimeError(f"cannot commit {step_path}: shard {s} wrote no manifest ({path})")
        files[f"{path.parent.name}/{MANIFEST}"] = file_entry(path)
    step_path.mkdir(parents=True, exist_ok=True)  # every shard on its own disk, nothing written here yet
    for child in sorted(step_path.iterdir()):
        if child.is_dir() and not child.name.startswith("shard-") and (child / STATE).is_file():
            files[f"{child.name}/{STATE}"] = file_entry(child / STATE)
    failpoint("save.before_commit")
    marker = {"format_version": FORMAT_VERSION, "kind": "cardinal.commit", "step": step, "n_shards": n_shards,
              "routing": ROUTING_NAME, "shards": shard_names(n_shards), "files": files, "extra": extra or {}}
    if base is not None:
        marker["base"] = base
        marker["base_sha256"] = base_sha256 or chain.digest(read_json(step_dir(step_path.parent, base) / COMMIT))
    if run is not None:
        marker["run"] = run
    if plan is not None:
        marker["plan"] = plan
    if held:
        marker[REMOTE] = held
    marker["crc32"] = crc32_json(marker)
    write_json(step_path / COMMIT, marker)
    return chain.digest(marker)
