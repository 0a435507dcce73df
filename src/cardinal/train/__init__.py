"""Training: the loop, checkpoints, metrics (the recipe it trains is ``cardinal.recipe``'s).

``Trainer`` loads on first use, so importing this package imports no torch (fast errors)."""

from cardinal.train.callbacks import Callback, EarlyStopping

__all__ = ["Callback", "EarlyStopping", "Trainer"]


def __getattr__(name: str):
    if name != "Trainer":
        raise AttributeError(f"module 'cardinal.train' has no attribute {name!r}")
    from cardinal.train.trainer import Trainer

    globals()["Trainer"] = Trainer
    return Trainer
