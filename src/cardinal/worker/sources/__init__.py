"""Row sources of the worker's embedding module: parameter servers, GEO replica, a cache of hot
rows over the servers (``cache.CachedSource``)."""

from cardinal.worker.sources.base import RowSource
from cardinal.worker.sources.geo import GeoReplica
from cardinal.worker.sources.ps import PSSource

__all__ = ["GeoReplica", "PSSource", "RowSource"]
