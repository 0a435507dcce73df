"""Pooling strategies: compiled CPU kernels (the default) and torch ops (any device)."""

from cardinal.worker.pooling.base import Pooling
from cardinal.worker.pooling.compiled import CompiledPooling, bag_pool
from cardinal.worker.pooling.torch_ops import TorchPooling

__all__ = ["CompiledPooling", "Pooling", "TorchPooling", "bag_pool"]
