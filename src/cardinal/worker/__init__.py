"""Worker side: parameter-server embeddings as a PyTorch module, its row sources and pooling."""

from cardinal.worker.collection import EmbeddingCollection
from cardinal.worker.pooling import CompiledPooling, Pooling, TorchPooling
from cardinal.worker.sources import GeoReplica, PSSource, RowSource

__all__ = ["CompiledPooling", "EmbeddingCollection", "GeoReplica", "PSSource", "Pooling", "RowSource", "TorchPooling"]
