"""Embedding tables: collisionless int64 ids -> rows, compiled kernels, row storage."""

from cardinal.embedding.dedup import segment_sum, unique_inverse
from cardinal.embedding.table import EmbeddingTable, TableConfig, combine_digests

__all__ = ["EmbeddingTable", "TableConfig", "combine_digests", "unique_inverse", "segment_sum"]
