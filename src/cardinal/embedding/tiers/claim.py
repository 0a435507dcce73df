"""The directories of disk tiers: each owned by a lock its server holds, so a killed run's are reclaimed.

A store with a disk tier makes ``cardinal-tier-<shard>-<random>`` under ``ps.memory.disk_dir`` (or the
system's temporary directory) and removes it when it closes. A server killed with SIGKILL (or
the OOM killer, or a lost machine) never closes, and its directory, often gigabytes of RocksDB
files, stayed forever. So each directory has a lock file beside it, made and ``flock``-ed
before the directory, held for the store's life:

    tiers/cardinal-tier-0-k3j9.lock    flock held by the live server (the kernel drops it when it dies)
    tiers/cardinal-tier-0-k3j9/        its RocksDB tiers

Every new store first reclaims the directories whose lock nobody holds: their owner is gone,
however it died. A live server's lock cannot be taken, so its directory is never touched; a
directory with no lock file (made before this, or by something else) is left alone.
"""

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "cardinal-tier-"


class TierDir:
    """``path``: a new, empty directory, locked until ``release``; ``release`` removes both."""

    def __init__(self, parent: str | None, shard: int):
        parent_dir = Path(parent or tempfile.gettempdir())
        parent_dir.mkdir(parents=True, exist_ok=True)
        reclaim(parent_dir)
        fd, lock = tempfile.mkstemp(prefix=f"{PREFIX}{shard}-", suffix=".lock", dir=parent_dir)
        fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else holds it
        self._fd, self.lock = fd, Path(lock)
        self.path = self.lock.with_suffix("")
        self.path.mkdir()

    def release(self) -> None:
        if self._fd is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.lock.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None


def reclaim(parent: Path) -> list[Path]:
    """Remove every tier directory under ``parent`` whose lock no process holds; returns them."""
    removed = []
    for lock in sorted(parent.glob(f"{PREFIX}*.lock")):
        try:
            fd = os.open(lock, os.O_RDWR)
        except OSError:  # gone meanwhile (its owner closed, or another server reclaimed it)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a live server's
            os.close(fd)
            continue
        try:
            shutil.rmtree(lock.with_suffix(""), ignore_errors=True)
            lock.unlink(missing_ok=True)
            removed.append(lock.with_suffix(""))
        finally:
            os.close(fd)
    return removed
