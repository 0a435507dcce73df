"""What one shard store may hold and create: limits that concern rows, enforced by the store.

They hold for every transport (the in-process one too) and are tested without sockets. The
recipe's ``[ps.limits]`` and ``[ps.memory]`` budgets set them (``store_limits``).
Limits that concern bytes and calls (message size, concurrent calls, header size and depth)
belong to the server and the wire (``server/process.py``, ``transport/wire.py``).

    max_rows                   rows of all tables together on this server; a request that
                               would pass it is refused whole (``StoreFull``), nothing created
    memory_budget              bytes of all tables together in RAM (0: none); past it rows
                               leave RAM (``server/memory.py``); new rows it has no room for (the
                               rows held are in flight) are refused (``StoreFull``, ``server/budget.py``)
    disk_budget                bytes of rows in the disk tier (0: no disk tier); past it the
                               disk tier's rows are evicted
    max_new_rows_per_request   rows one pull or push may create
    request_window             request ids remembered per client (exactly-once, ``server/request_log.py``)
    max_clients                clients remembered at once; idle ones are forgotten after
    client_idle_s              seconds without a request (longer than any client's resends)
    max_step_ahead             steps a training request may run past the newest step this
                               server accepted; past it the request is refused (``server/step_clock.py``)
    max_gradient               the largest |gradient| a push may carry; past it the push is
                               refused whole, as a non-finite one is. The default, 1e9, is far
                               past any sane gradient, and its square (1e18) added to a float32
                               accumulator (Adagrad, FTRL; Adam's v is at most it) each step
                               stays finite for 3e20 steps: a finite 1e19 would pass float32's
                               3.4e38 in 4 pushes and freeze its row (every later push refused).
                               inf: no bound (the store still refuses non-finite results)
"""

from dataclasses import dataclass, fields

MAX_STEP_AHEAD = 64  # ps.limits.max_step_ahead's default: the combined-step window (server/worker_steps.py MAX_AHEAD)


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
    max_step_ahead: int = MAX_STEP_AHEAD
    max_gradient: float = 1e9

    def __post_init__(self):
        for f in fields(self):
            value, whole, name = getattr(self, f.name), f.type is int, RECIPE_KEYS.get(f.name, f"ps.limits.{f.name}")
            if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
                raise ValueError(f"{name} must be {'an integer' if whole else 'a number'}, "
                                 f"got {type(value).__name__} {value!r}")
            least = 0 if f.name.endswith("_budget") else 1
            if not value >= least:
                raise ValueError(f"{name} must be >= {least}, got {value!r}")
        if self.disk_budget and not self.memory_budget:
            raise ValueError("ps.memory.disk_budget needs ps.memory.budget: rows go to disk when RAM is past its "
                             "budget")


RECIPE_KEYS = {"memory_budget": "ps.memory.budget", "disk_budget": "ps.memory.disk_budget"}  # the others: ps.limits.*


def store_limits(ps, shares: int = 1) -> StoreLimits:
    """The limits of one store from the recipe's ``[ps]`` (its ``[ps.limits]`` and ``[ps.memory]``);
    ``shares`` stores (embedded shards) split the memory budgets."""
    lim, memory = ps.limits, ps.memory
    return StoreLimits(max_rows=lim.max_rows, max_new_rows_per_request=lim.max_new_rows_per_request,
                       request_window=lim.request_window, max_clients=lim.max_clients,
                       client_idle_s=lim.client_idle_s, max_step_ahead=lim.max_step_ahead,
                       memory_budget=memory.budget_bytes() // shares, disk_budget=memory.disk_bytes() // shares,
                       max_gradient=lim.max_gradient)
