"""Which checkpoints a run keeps: the newest few, the best, and every checkpoint a kept delta needs.

Removal runs only after a commit (``write.py``), so a crash leaves at least the newest committed
checkpoint and its chain; an uncommitted directory older than every kept one is a crashed save's
leftover and goes too.
"""

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from cardinal.checkpoint.chain import base_of
from cardinal.checkpoint.layout import committed_steps, step_dir, step_of
from cardinal.failpoints import failpoint


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
        step = step_of(path)
        if path.is_dir() and step < oldest_kept and step not in needed:
            shutil.rmtree(path)



def keep_only(root: str | os.PathLike, steps: Iterable[int], before: int) -> None:
    """A server's own disk: delete the step directories under ``root`` older than ``before`` that are
    not in ``steps`` (the ones the workers' rank 0 still keeps, after its own ``remove_older``). The
    server holds no commits there; rank 0's are the record of what is kept, one save behind."""
    keep = set(steps)
    for path in Path(root).glob("step-*"):
        step = step_of(path)
        if path.is_dir() and 0 <= step < before and step not in keep:
            shutil.rmtree(path, ignore_errors=True)
