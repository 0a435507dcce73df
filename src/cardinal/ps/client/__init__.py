"""The client side: ``connect()`` and ``PSClient``, one table-level API over the shards of any
transport, and what it counts of the traffic."""
