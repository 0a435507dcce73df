"""Readers (Criteo TSV, Parquet, MovieLens), the synthetic generator, and batches."""

from cardinal.data.batch import Bag, Batch
from cardinal.data.criteo import CriteoReader
from cardinal.data.movielens import MovieLensReader
from cardinal.data.parquet import ParquetReader, convert
from cardinal.data.synthetic import SyntheticConfig, generate

__all__ = ["Bag", "Batch", "CriteoReader", "ParquetReader", "MovieLensReader", "convert", "generate", "SyntheticConfig"]
