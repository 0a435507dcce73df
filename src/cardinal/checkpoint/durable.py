"""Durable files: written with fsync and a crc32, read back only once verified.

Shared by shard checkpoints (``write.py``) and the trainer's dense state (``dense.py``),
so both follow one rule for what a checkpoint file is:

    write_array(path, a) -> {"file": "user.ids.npy", "bytes": 1234, "crc32": 987654}
    verify_file(path, entry)        size and crc32 against that entry, or ValueError naming path
    load_array(path)                ``.npy`` without pickle

and one rule for the names a manifest may give (``check_name``): plain file names inside
the checkpoint's directory, so a tampered manifest can never make a load read elsewhere.
"""

import json
import os
import re
import threading
import uuid
import zlib
from pathlib import Path

import numpy as np

_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_name(name, where: str, pattern: re.Pattern | None = None) -> str:
    """``name`` if it is a plain file name (no separators, no '..', not absolute, no NUL) that
    matches ``pattern`` when one is given; otherwise a ValueError naming ``where``."""
    if not isinstance(name, str) or not _PLAIN.fullmatch(name) or ".." in name:
        raise ValueError(f"{where}: file name {name!r} is not a plain file name inside the checkpoint "
                         f"(letters, digits, '_', '-', '.'; no path separators or '..')")
    if pattern is not None and not pattern.fullmatch(name):
        raise ValueError(f"{where}: file name {name!r} is not the expected {pattern.pattern!r}")
    return name


class _ChecksumWriter:
    """A file object that fsyncs on close and keeps the crc32 and size of what went through."""

    def __init__(self, path: Path):
        self.file = open(path, "wb")
        self.crc = 0
        self.size = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        self.size += view.nbytes
        return self.file.write(view)

    def close(self):
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()


def write_array(path: Path, array: np.ndarray) -> dict:
    writer = _ChecksumWriter(path)
    try:
        # np.asarray keeps a 0-d array 0-d (np.ascontiguousarray would make it (1,))
        np.lib.format.write_array(writer, np.asarray(array, order="C"), allow_pickle=False)
    finally:
        writer.close()
    fsync_dir(path.parent)
    return {"file": path.name, "bytes": writer.size, "crc32": writer.crc}


class ArrayWriter:
    """One ``.npy`` file written a block of rows at a time (a table larger than RAM is never whole in
    memory): its shape is given up front, for the header; ``close`` checks that every row came and
    returns the entry ``write_array`` would (the same bytes as writing the whole array at once)."""

    def __init__(self, path: Path, dtype, shape: tuple[int, ...]):
        self.path, self.dtype, self.shape, self.left = path, np.dtype(dtype), shape, shape[0]
        self.writer = _ChecksumWriter(path)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(self.writer, header)

    def write(self, rows: np.ndarray) -> None:
        assert rows.dtype == self.dtype and rows.shape[1:] == self.shape[1:] and len(rows) <= self.left
        self.writer.write(np.ascontiguousarray(rows))
        self.left -= len(rows)

    def close(self) -> dict:
        self.writer.close()
        assert self.left == 0, f"{self.path}: {self.left} rows of {self.shape[0]} never written"
        fsync_dir(self.path.parent)
        return {"file": self.path.name, "bytes": self.writer.size, "crc32": self.writer.crc}


def write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


# numpy parses each .npy header with ast.literal_eval, and CPython 3.11 can fail two ast parses
# running at once in two threads ("SystemError: AST constructor recursion depth mismatch",
# python/cpython#106905): the embedded shards load their files in threads, so loads take turns.
_NPY_LOCK = threading.Lock()


def load_array(path: Path, mmap: bool = True) -> np.ndarray:
    try:
        with _NPY_LOCK:
            return np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
    except (OSError, ValueError) as e:
        raise ValueError(f"checkpoint file unreadable: {path} ({e})") from None


def read_json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"checkpoint file unreadable: {path} ({e})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"checkpoint file unreadable: {path} holds a JSON {type(obj).__name__}, not an object")
    return obj


def file_entry(path: Path) -> dict:
    """The {"bytes", "crc32"} a manifest records for an existing file."""
    return {"bytes": path.stat().st_size, "crc32": crc32_file(path)}


def probe_dir(path: Path) -> None:
    """Make ``path`` and write, sync and remove a file in it: a dry save, so a checkpoint directory
    that cannot be written fails at a job's start, not at its first save. OSError when it cannot.
    The directory stays (the first save writes there); the probe, named for this call alone, goes:
    several shards and workers probe one directory at once."""
    path.mkdir(parents=True, exist_ok=True)
    probe = path / f".probe-{uuid.uuid4().hex}"
    try:
        with open(probe, "wb") as f:
            f.write(b"cardinal")
            f.flush()
            os.fsync(f.fileno())
    finally:
        probe.unlink(missing_ok=True)


def bytes_entry(data: bytes) -> dict:
    """The {"bytes", "crc32"} of a file's contents sent over the wire (a manifest on its server's disk)."""
    return {"bytes": len(data), "crc32": zlib.crc32(data)}


def verify_file(path: Path, entry) -> None:
    if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int) \
            or not isinstance(entry.get("crc32"), int):
        raise ValueError(f"checkpoint manifest entry for {path} must hold integer 'bytes' and 'crc32', got {entry!r}")
    if not path.is_file():
        raise ValueError(f"checkpoint file missing: {path}")
    size = path.stat().st_size
    if size != entry["bytes"]:
        raise ValueError(f"checkpoint file truncated or grown: {path} has {size} bytes, manifest says {entry['bytes']}")
    if crc32_file(path) != entry["crc32"]:
        raise ValueError(f"checkpoint file corrupt (checksum mismatch): {path}")


def crc32_file(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def crc32_json(obj: dict) -> int:
    """crc32 of ``obj``'s canonical JSON (sorted keys, no spaces): how a JSON file checks itself."""
    return zlib.crc32(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
