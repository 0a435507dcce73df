"""The marker that names a run's best checkpoint, beside its step directories:

    checkpoints/step-0000000300/      the best (protected from keep_checkpoints: ``retention.py``)
    checkpoints/step-0000000450/      the newest
    checkpoints/best.json             {"step": 300, "checkpoint": "step-0000000300", "metric": "auc",
                                       "eval_auc": 0.79, "eval_logloss": 0.45}

Written after that checkpoint is committed. Which evaluation is the best is the trainer's call
(``train/best.py``); export, eval and the summary find the best checkpoint here.
"""

import math
from pathlib import Path

from cardinal.checkpoint.durable import read_json, write_json
from cardinal.checkpoint.layout import committed, step_dir

MARKER = "best.json"


def write_marker(root: Path, step: int, metric: str, result: dict) -> None:
    """Name the best checkpoint, of ``step``, judged by ``metric``, with its evaluation's finite numbers."""
    write_json(root / MARKER, {"step": step, "checkpoint": step_dir(root, step).name, "metric": metric,
                               **{k: v for k, v in result.items() if isinstance(v, (int, float)) and math.isfinite(v)}})


def best_checkpoint(root: Path) -> Path | None:
    """The committed checkpoint ``best.json`` names, or None (no marker, or its checkpoint is gone)."""
    marker = root / MARKER
    if not marker.is_file():
        return None
    step = read_json(marker).get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError(f"{marker}: 'step' must be an integer, got {step!r}")
    path = step_dir(root, step)
    return path if committed(path) else None
