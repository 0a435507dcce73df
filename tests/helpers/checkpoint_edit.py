"""Editing saved checkpoints the way a user (or a bad script) would, for tamper tests.

``reseal(step_path)`` recomputes every checksum after an edit, bottom up (shard manifests'
file entries, dense state.json's, commit.json's entries and its own crc32), so a test can
show that a load catches the edit by what it *means*, not only by a stale checksum.
"""

import json
from pathlib import Path

import numpy as np

from cardinal.checkpoint.durable import crc32_file, crc32_json, file_entry, write_json


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def reseal(step_path: Path) -> None:
    for manifest_path in sorted(step_path.glob("shard-*/manifest.json")):
        manifest = read(manifest_path)
        for table in manifest["tables"].values():
            for entry in table["files"].values():
                target = manifest_path.parent / entry["file"]  # may point anywhere: that is the test
                if target.is_file():
                    entry.update(file_entry(target))
        write_json(manifest_path, manifest)
    for state in sorted(step_path.glob("*/state.json")):
        meta = read(state)
        for name, entry in meta["files"].items():
            if (state.parent / name).is_file():
                entry.update(file_entry(state.parent / name))
        write_json(state, meta)
    commit = read(step_path / "commit.json")
    files = commit.get("files", {})
    for rel in files:
        if (step_path / rel).is_file():
            files[rel] = {"bytes": (step_path / rel).stat().st_size, "crc32": crc32_file(step_path / rel)}
    commit.pop("crc32", None)
    commit["crc32"] = crc32_json(commit)
    write_json(step_path / "commit.json", commit)


def edit_json(path: Path, change) -> None:
    obj = read(path)
    change(obj)
    write_json(path, obj)


def rewrite_columns(shard_path: Path, table: str, change) -> None:
    """``change(cols)`` edits {column: array} of one table in place; the manifest's row count follows ids."""
    cols = {c: np.load(shard_path / f"{table}.{c}.npy") for c in ("ids", "data", "count", "last_step")}
    change(cols)
    for c, a in cols.items():
        np.save(shard_path / f"{table}.{c}.npy", a)
    edit_json(shard_path / "manifest.json", lambda m: m["tables"][table].update(rows=len(cols["ids"])))
