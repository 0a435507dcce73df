"""Training: recipes, the loop, checkpoints, metrics.

``Trainer`` loads on first use, so reading a recipe imports no torch (fast errors)."""

from cardinal.train.callbacks import Callback, EarlyStopping
from cardinal.train.config import Recipe, load

__all__ = ["Callback", "EarlyStopping", "Recipe", "load", "Trainer"]


def __getattr__(name: str):
    if name != "Trainer":
        raise AttributeError(f"module 'cardinal.train' has no attribute {name!r}")
    from cardinal.train.trainer import Trainer

    globals()["Trainer"] = Trainer
    return Trainer
