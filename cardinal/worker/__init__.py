"""Worker side: parameter-server embeddings as a PyTorch module."""

from cardinal.worker.collection import EmbeddingCollection

__all__ = ["EmbeddingCollection"]
