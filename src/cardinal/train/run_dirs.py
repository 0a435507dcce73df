"""A new run's directory: ``train.run_dir/NAME-YYYYmmdd-HHMMSS``, its own even when two runs start
in the same second (``cardinal train`` and ``cardinal launch`` make them)."""

import time
from pathlib import Path


def _timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def new_run_dir(root: Path, name: str) -> Path:
    """``root/name-YYYYmmdd-HHMMSS``, made here and now: mkdir fails if another run took the name
    (two started in the same second), and the next free ``-2``, ``-3``... is taken instead."""
    root.mkdir(parents=True, exist_ok=True)
    base = f"{name}-{_timestamp()}"
    for n in range(1, 10_000):
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ValueError(f"{root} holds 9,999 runs named {base}*: set train.run_dir to another folder")
