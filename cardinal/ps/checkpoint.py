"""Checkpoints of shard stores: atomic, verified, loadable into any shard count.

    <root>/step-0000000042/
        shard-00000-of-00002/
            user.ids.npy  user.data.npy  user.count.npy  user.last_step.npy  ...
            manifest.json     the shard's files, sizes and crc32s; written after them
        shard-00001-of-00002/ ...
        commit.json           written last: the checkpoint exists once this file does

A save writes each file, fsyncs it and its directory, writes the shard manifest, then
(once every shard is written) the commit marker; only then are older checkpoints removed.
A crash at any point leaves the previous committed checkpoint whole, and an uncommitted
directory is never loaded. A load verifies every size and checksum before it changes any
state, and names the file at fault. Arrays are ``.npy`` read with ``allow_pickle=False``;
manifests are JSON.

Resharding: a store of shard s of N loads, from every saved shard, the rows whose id
routes to s under N (``routing.route``). With the same N, it reads only its own files.
"""

import os
import shutil
from pathlib import Path

import numpy as np

from cardinal.durable import crc32_file, load_array as _load_array, read_json, verify_file, write_array, write_json
from cardinal.embedding.hashing import ROUTING_NAME
from cardinal.failpoints import failpoint
from cardinal.ps.routing import route

FORMAT_VERSION = 1
COMMIT = "commit.json"
MANIFEST = "manifest.json"
COLUMNS = ("ids", "data", "count", "last_step")


def step_dir(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"step-{step:010d}"


def shard_dir(step_path: Path, shard: int, n_shards: int) -> Path:
    return step_path / f"shard-{shard:05d}-of-{n_shards:05d}"


# --- saving -------------------------------------------------------------------------------

def save_shard(step_path: Path, shard: int, n_shards: int, step: int, tables: dict) -> dict:
    """Write one shard's tables (name -> EmbeddingTable) and its manifest; returns the manifest."""
    out = shard_dir(step_path, shard, n_shards)
    if out.exists():
        shutil.rmtree(out)  # left by a crashed save of this step: it was never committed
    out.mkdir(parents=True)
    manifest = {"format_version": FORMAT_VERSION, "kind": "cardinal.shard", "shard": shard,
                "n_shards": n_shards, "routing": ROUTING_NAME, "step": step, "tables": {}}
    for name, table in tables.items():
        arrays = table.export()
        files = {}
        for column in COLUMNS:
            files[column] = write_array(out / f"{name}.{column}.npy", arrays[column])
            failpoint("save.shard_file_written")
        manifest["tables"][name] = {"dim": table.dim, "width": table.storage.width, "rows": len(arrays["ids"]),
                                    "init_scale": table.config.init_scale, "seed": table.config.seed,
                                    "optimizer": table.optimizer.describe(), "files": files}
    failpoint("save.before_shard_manifest")
    write_json(out / MANIFEST, manifest)
    return manifest


def commit(step_path: Path, step: int, n_shards: int, extra: dict | None = None) -> None:
    """Write the commit marker after checking that every shard's manifest is in place."""
    shards = {}
    for s in range(n_shards):
        path = shard_dir(step_path, s, n_shards) / MANIFEST
        if not path.exists():
            raise RuntimeError(f"cannot commit {step_path}: shard {s} wrote no manifest ({path})")
        shards[path.parent.name] = {"manifest_crc32": crc32_file(path)}
    failpoint("save.before_commit")
    write_json(step_path / COMMIT, {"format_version": FORMAT_VERSION, "step": step,
                                     "n_shards": n_shards, "shards": shards, "extra": extra or {}})


def remove_older(root: str | os.PathLike, keep: int) -> None:
    """Delete all but the newest ``keep`` committed checkpoints, and any uncommitted leftovers older than them."""
    failpoint("save.before_cleanup")
    committed = committed_steps(root)
    if len(committed) <= keep:
        return
    oldest_kept = committed[-keep]
    for path in Path(root).glob("step-*"):
        if path.is_dir() and _step_of(path) < oldest_kept:
            shutil.rmtree(path)


# --- finding and verifying ----------------------------------------------------------------

def committed_steps(root: str | os.PathLike) -> list[int]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(_step_of(p) for p in root.glob("step-*") if (p / COMMIT).is_file())


def latest(root: str | os.PathLike) -> Path | None:
    """The newest committed checkpoint under ``root``, or None."""
    steps = committed_steps(root)
    return step_dir(root, steps[-1]) if steps else None


def read_commit(step_path: Path) -> dict:
    """The commit marker, with every shard manifest and file verified (sizes and crc32)."""
    marker = step_path / COMMIT
    if not marker.is_file():
        raise ValueError(f"{step_path} is not a committed checkpoint: {COMMIT} is missing")
    info = read_json(marker)
    if info.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{marker}: format version {info.get('format_version')} is not {FORMAT_VERSION}")
    info["manifests"] = {}
    for name, entry in info["shards"].items():
        path = step_path / name / MANIFEST
        if not path.is_file():
            raise ValueError(f"checkpoint file missing: {path}")
        if crc32_file(path) != entry["manifest_crc32"]:
            raise ValueError(f"checkpoint file corrupt (checksum mismatch): {path}")
        manifest = read_json(path)
        if manifest.get("routing") != ROUTING_NAME:
            raise ValueError(f"{path}: saved with routing {manifest.get('routing')!r}, this build routes by {ROUTING_NAME!r}")
        for table in manifest["tables"].values():
            for entry in table["files"].values():
                verify_file(path.parent / entry["file"], entry)
        info["manifests"][name] = manifest
    return info


def load_shard_rows(step_path: Path, info: dict, shard: int, n_shards: int, tables: dict) -> dict:
    """Rows for shard ``shard`` of ``n_shards``: {table: {column: array}}, from a verified ``info``.

    ``tables`` (name -> EmbeddingTable) is checked against the saved tables first.
    """
    manifests = list(info["manifests"].values())
    for name, table in tables.items():
        for m in manifests:
            _check_compatible(name, table, m, step_path)
    same_layout = info["n_shards"] == n_shards
    out = {}
    for name in tables:
        parts = {c: [] for c in COLUMNS}
        for m in manifests:
            if same_layout and m["shard"] != shard:
                continue
            entry = m["tables"][name]
            base = shard_dir(step_path, m["shard"], m["n_shards"])
            cols = {c: _load_array(base / entry["files"][c]["file"]) for c in COLUMNS}
            keep = slice(None) if same_layout else route(np.asarray(cols["ids"]), n_shards) == shard
            for c in COLUMNS:
                parts[c].append(np.asarray(cols[c][keep]))
        out[name] = {c: np.concatenate(parts[c]) for c in COLUMNS}
    return out


def _check_compatible(name, table, manifest, step_path):
    saved = manifest["tables"].get(name)
    where = f"checkpoint {step_path.name}, shard {manifest['shard']}"
    if saved is None:
        raise ValueError(f"{where} has no table {name!r}; it has {sorted(manifest['tables'])}")
    if saved["dim"] != table.dim:
        raise ValueError(f"{where}: table {name!r} has dim {saved['dim']}, the store expects {table.dim}")
    if saved["optimizer"]["name"] != table.optimizer.name:
        raise ValueError(f"{where}: table {name!r} was trained with {saved['optimizer']['name']!r}, "
                         f"the store uses {table.optimizer.name!r} (their state does not carry over)")


def _step_of(path: Path) -> int:
    try:
        return int(path.name.split("-", 1)[1])
    except (IndexError, ValueError):
        return -1
