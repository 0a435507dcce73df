"""Training: recipes, the loop, checkpoints, metrics."""

from cardinal.train.config import Recipe, load
from cardinal.train.trainer import Trainer

__all__ = ["Recipe", "load", "Trainer"]
