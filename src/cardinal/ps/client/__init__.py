"""The client side: ``connect()`` and ``PSClient``, one table-level API over the shards of any
transport; how it cuts a request by the sharding plan, how it reads copies of hot rows, and what
it counts of the traffic."""
