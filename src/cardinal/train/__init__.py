"""Training: recipes, the loop, checkpoints, metrics."""

from cardinal.train.callbacks import Callback, EarlyStopping
from cardinal.train.config import Recipe, load
from cardinal.train.trainer import Trainer

__all__ = ["Callback", "EarlyStopping", "Recipe", "load", "Trainer"]
