"""The server side: a shard store and what it owns (clocks, request log, budget, memory, update
log, copies of other servers' hot rows), the gRPC servicer and the server process."""
