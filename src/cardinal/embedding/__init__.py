"""Embedding tables: collisionless int64 ids -> rows, compiled kernels, row storage.

What a parameter server uses of a table is ``protocol.Table``: ``EmbeddingTable`` (``table.py``) and
the clustered ``SaecTable`` (``clustered_table.py``) implement it.
"""

from cardinal.embedding.dedup import segment_sum, unique_inverse
from cardinal.embedding.table import EmbeddingTable, TableConfig
from cardinal.embedding.table_views import combine_digests

__all__ = ["EmbeddingTable", "TableConfig", "combine_digests", "unique_inverse", "segment_sum"]
