"""Checkpoints of shard stores: atomic, verified, loadable into any shard count.

    <root>/step-0000000042/
        shard-00000-of-00002/
            user.ids.npy  user.data.npy  user.count.npy  user.last_step.npy  ...  (data: portable
                              rows, ``embedding/formats/base.py``: values and state whole)
            user.admission.ids.npy ...  the table's admission filter state, if it keeps any
            manifest.json     the shard's files, sizes and crc32s; written after them
        shard-00001-of-00002/ ...
        dense/state.json ...  the trainer's dense state (``train/state_io.py``), if any
        commit.json           written last: the checkpoint exists once this file does; lists
                              every manifest and state.json (size, crc32) and checks itself

A table saved in files of its own writes those instead (``Table.checkpoint_files``, ``embedding/protocol.py``):
a clustered (Saec) table its map and cluster rows (``embedding/clustered_checkpoint.py``).

A delta checkpoint (``base`` = the step of the checkpoint it applies on, ``base_sha256`` = the digest
of that one's commit, ``run`` = the run's id: ``checkpoint_chain.py``) holds only the rows
pulled or pushed after that step, plus ``<table>.deleted.npy``, the ids deleted since; it is
loaded as its chain, the full checkpoint at its root then every delta in order
(``checkpoint_load.py``), and older checkpoints are removed only when no kept one needs them.

A save writes each file, fsyncs it and its directory, writes the shard manifest, then
(once every shard is written) the commit marker; only then are older checkpoints removed.
A crash at any point leaves the previous committed checkpoint whole, and an uncommitted
directory is never loaded. Loading (verification first, then a swap) is in
``checkpoint_load.py``. Arrays are ``.npy`` read with ``allow_pickle=False``; manifests
are JSON.
"""

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from cardinal.durable import ArrayWriter, crc32_json, file_entry, read_json, write_array, write_json
from cardinal.embedding.hashing import ROUTING_NAME
from cardinal.failpoints import failpoint
from cardinal.ps.process_memory import SAVE_CHUNK_BYTES

FORMAT_VERSION = 2  # 2: commit.json checks itself and lists every top-level file
COMMIT = "commit.json"
MANIFEST = "manifest.json"
STATE = "state.json"  # the index of a directory of dense state (train/state_io.py)
COLUMNS = ("ids", "data", "count", "last_step")
DELETED = "deleted"  # a delta checkpoint's ids deleted since its base


def step_dir(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"step-{step:010d}"


def shard_dir(step_path: Path, shard: int, n_shards: int) -> Path:
    return step_path / f"shard-{shard:05d}-of-{n_shards:05d}"


def admission_file(table: str, key: str) -> str:
    return f"{table}.admission.{key}.npy"


# --- saving -------------------------------------------------------------------------------

def save_shard(step_path: Path, shard: int, n_shards: int, step: int, tables: dict, snapshots: dict,
               base: int | None = None) -> dict:
    """Write one shard's tables (name -> ``Table``, ``embedding/protocol.py``, their locks held; ``snapshots``:
    name -> ``Table.snapshot``, what to write) and its manifest; returns the manifest. With ``base`` the
    snapshots hold the rows changed since that step, and the deleted ids are written."""
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
            files, n = _write_chunks(out, name, table), len(table)
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


def _write_chunks(out: Path, name: str, table) -> dict:
    """A table's four column files, written from ``table.row_chunks()`` (its lock held by the caller)."""
    n, width = len(table), table.portable_width
    shapes = {"ids": ((n,), np.int64), "data": ((n, width), np.float32), "count": ((n,), np.uint32),
              "last_step": ((n,), np.uint32)}
    writers = {c: ArrayWriter(out / f"{name}.{c}.npy", dtype, shape) for c, (shape, dtype) in shapes.items()}
    for chunk in table.row_chunks(max(1, SAVE_CHUNK_BYTES // (4 * width + 16))):  # a bounded copy at a time
        for column in COLUMNS:
            writers[column].write(getattr(chunk, column))
    files = {}
    for column in COLUMNS:
        files[column] = writers[column].close()
        failpoint("save.shard_file_written")
    return files


def commit(step_path: Path, step: int, n_shards: int, extra: dict | None = None, base: int | None = None,
           plan: dict | None = None, run: dict | None = None, base_sha256: str | None = None) -> str:
    """Write the commit marker after checking that every shard's manifest is in place.

    The marker lists every other top-level file of the checkpoint with its size and crc32:
    each shard's manifest and any ``<dir>/state.json`` written beside them (the trainer's
    dense state), and carries the crc32 of its own canonical JSON, so that no file of a
    committed checkpoint can be edited unnoticed. ``plan``: the sharding plan the shards were
    saved in (``ShardingPlan.to_json``; recorded unless it is the hash plan, ``plan.py``).
    ``run``: {"id", "full_every"} of the run saving it; a delta records ``base_sha256``, the digest
    of the commit it was saved on (read from its directory when None: ``checkpoint_chain.py``).
    Returns this commit's digest.
    """
    from cardinal.ps import checkpoint_chain
    files = {}
    for s in range(n_shards):
        path = shard_dir(step_path, s, n_shards) / MANIFEST
        if not path.exists():
            raise RuntimeError(f"cannot commit {step_path}: shard {s} wrote no manifest ({path})")
        files[f"{path.parent.name}/{MANIFEST}"] = file_entry(path)
    for child in sorted(step_path.iterdir()):
        if child.is_dir() and not child.name.startswith("shard-") and (child / STATE).is_file():
            files[f"{child.name}/{STATE}"] = file_entry(child / STATE)
    failpoint("save.before_commit")
    marker = {"format_version": FORMAT_VERSION, "kind": "cardinal.commit", "step": step, "n_shards": n_shards,
              "routing": ROUTING_NAME, "shards": shard_names(n_shards), "files": files, "extra": extra or {}}
    if base is not None:
        marker["base"] = base
        marker["base_sha256"] = base_sha256 or checkpoint_chain.digest(read_json(step_dir(step_path.parent, base)
                                                                                 / COMMIT))
    if run is not None:
        marker["run"] = run
    if plan is not None:
        marker["plan"] = plan
    marker["crc32"] = crc32_json(marker)
    write_json(step_path / COMMIT, marker)
    return checkpoint_chain.digest(marker)


def shard_names(n_shards: int) -> list[str]:
    """The shard directories a checkpoint of ``n_shards`` holds, exactly."""
    return [shard_dir(Path(), s, n_shards).name for s in range(n_shards)]


def remove_older(root: str | os.PathLike, keep: int, protect: Iterable[int] = ()) -> None:
    """Delete all but the newest ``keep`` committed checkpoints, and any uncommitted leftovers older
    than them; the steps in ``protect`` (the run's best checkpoint) are never deleted."""
    failpoint("save.before_cleanup")
    committed = committed_steps(root)
    if len(committed) <= keep:
        return
    oldest_kept, needed = committed[-keep], set(committed[-keep:]) | set(protect)
    for step in list(needed):  # a kept delta keeps its chain down to its full checkpoint
        while step in committed and (base := base_of(step_dir(root, step))) is not None and base not in needed:
            needed.add(base)
            step = base
    for path in Path(root).glob("step-*"):
        step = _step_of(path)
        if path.is_dir() and step < oldest_kept and step not in needed:
            shutil.rmtree(path)


def deltas_since_full(root: str | os.PathLike, step: int) -> int:
    """How many deltas lead from the full checkpoint at the root of ``step``'s chain to it (0: full)."""
    n, path, seen = 0, step_dir(root, step), {step}
    while (base := base_of(path)) is not None:
        if base in seen:  # a renamed checkpoint: its chain points at itself
            raise ValueError(f"{path / COMMIT}: a delta on step {base}, whose chain leads back to it")
        n, path = n + 1, step_dir(root, base)
        seen.add(base)
    return n


def base_of(step_path: Path) -> int | None:
    """The step a committed delta checkpoint applies on; None for a full one (or an unreadable marker,
    which the load will name)."""
    try:
        base = json.loads((step_path / COMMIT).read_text()).get("base")
    except (OSError, ValueError):
        return None
    return base if isinstance(base, int) and not isinstance(base, bool) else None


# --- finding -----------------------------------------------------------------------------

def committed_steps(root: str | os.PathLike) -> list[int]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(_step_of(p) for p in root.glob("step-*") if (p / COMMIT).is_file())


def latest(root: str | os.PathLike) -> Path | None:
    """The newest committed checkpoint under ``root``, or None."""
    steps = committed_steps(root)
    return step_dir(root, steps[-1]) if steps else None


def _step_of(path: Path) -> int:
    try:
        return int(path.name.split("-", 1)[1])
    except (IndexError, ValueError):
        return -1
