"""Ways to make embedding tables smaller: fewer distinct vectors than ids.

``saec``: similarity-aware embedding compression. Similar ids of a field share one vector;
``cluster`` picks which (frequency-guided k-means, fast enough for tens of millions of rows).
"""

from cardinal.compression.saec import Clustering, cluster

__all__ = ["Clustering", "cluster"]
