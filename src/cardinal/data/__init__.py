"""Readers (Criteo TSV, Parquet, MovieLens), the synthetic generator, and batches.

Names load on first use (PEP 562), so reading a recipe (``SyntheticConfig``) imports
neither torch nor numba: ``cardinal train --set bad.key=1`` fails in a fraction of a second."""

import importlib

_WHERE = {"Bag": "batch", "Batch": "batch", "CriteoReader": "criteo", "MovieLensReader": "movielens",
          "ParquetReader": "parquet", "convert": "parquet", "generate": "synthetic",
          "SyntheticConfig": "synthetic_config"}

__all__ = ["Bag", "Batch", "CriteoReader", "ParquetReader", "MovieLensReader", "convert", "generate", "SyntheticConfig"]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'cardinal.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"cardinal.data.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
