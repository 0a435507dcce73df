"""What one shard store may hold and create: limits that concern rows, enforced by the store.

They hold for every transport (the in-process one too) and are tested without sockets.
Limits that concern bytes and calls (message size, concurrent calls, header size and depth)
belong to the server and the wire (``server.py``, ``wire.py``).

    max_rows                   rows of all tables together on this server; a request that
                               would pass it is refused whole (``StoreFull``), nothing created
    memory_budget              bytes of all tables together in RAM (0: none); past it rows
                               leave RAM (``memory.py``); new rows it has no room for (the
                               rows held are in flight) are refused (``StoreFull``, ``budget.py``)
    disk_budget                bytes of rows in the disk tier (0: no disk tier); past it the
                               disk tier's rows are evicted
    max_new_rows_per_request   rows one pull or push may create
    request_window             request ids remembered per client (exactly-once, ``request_log.py``)
    max_clients                clients remembered at once; idle ones are forgotten after
    client_idle_s              seconds without a request (longer than any client's resends)
"""

from dataclasses import dataclass, fields


class StoreFull(ValueError):
    """A request that would create more rows than a limit allows: refused, nothing created.
    Servers answer it with RESOURCE_EXHAUSTED."""


@dataclass(frozen=True)
class StoreLimits:
    max_rows: int = 64_000_000
    max_new_rows_per_request: int = 1 << 20
    request_window: int = 2048
    max_clients: int = 1024
    client_idle_s: float = 600.0
    memory_budget: int = 0
    disk_budget: int = 0

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            least = 0 if f.name.endswith("_budget") else 1
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= least:
                raise ValueError(f"ps.{f.name} must be a number >= {least}, got {value!r}")
        if self.disk_budget and not self.memory_budget:
            raise ValueError("ps.disk_budget needs ps.memory_budget: rows go to disk when RAM is past its budget")
            if f.type is int and not isinstance(value, int):
                raise ValueError(f"ps.{f.name} must be an integer, got {value!r}")
