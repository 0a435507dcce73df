"""One generation of a cached data set, whoever asks for it first (``data.cache_dir``).

Two processes that need the same generated data set at once (two ``cardinal train`` started
together) must not both write it, nor read a half-written one. The first takes an exclusive
``fcntl.flock`` on ``NAME.lock`` beside the data set and generates into ``NAME.tmp-PID``, renamed
to ``NAME`` when complete; the others wait for the lock (saying so), then find ``NAME`` complete
and only read it. A generation stopped by Ctrl-C or an error removes its ``.tmp-*`` folder; one
killed leaves it, never a ``NAME`` that looks complete, and the next generation removes it. The
kernel drops a dead holder's lock.
"""

import fcntl
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)
WAIT_S = 3 * 3600.0  # the longest a generation may hold others waiting
POLL_S = 0.2


def generated_once(out: Path, complete: Callable[[Path], bool], make: Callable[[Path], None],
                   wait_s: float = WAIT_S) -> Path:
    """``out``, made by ``make(tmp_dir)`` unless ``complete(out)`` already holds, under the lock."""
    if complete(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    lock_path = out.with_name(out.name + ".lock")
    with open(lock_path, "a") as lock:
        _acquire(lock, lock_path, wait_s)
        try:
            if complete(out):  # another process generated it while this one waited
                return out
            for stale in out.parent.glob(out.name + ".tmp-*"):  # crashed generations: nobody holds them
                shutil.rmtree(stale, ignore_errors=True)
            if out.exists():  # an incomplete set from before this lock existed
                shutil.rmtree(out)
            tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
            tmp.mkdir()
            try:
                make(tmp)
                if not complete(tmp):
                    raise AssertionError(f"generation into {tmp} finished incomplete")
                os.rename(tmp, out)
            except BaseException:  # Ctrl-C or an error: no partial copy (hundreds of MB) left behind
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            return out
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _acquire(lock, lock_path: Path, wait_s: float) -> None:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    log.warning("another process is generating %s; waiting for it (lock %s)", lock_path.stem, lock_path)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise ValueError(f"waited {wait_s:.0f} s for the process generating {lock_path.stem} "
                                 f"(it holds {lock_path}); stop it, or set data.cache_dir to another folder")
            time.sleep(POLL_S)
