"""``ps.memory.budget`` as a bound: new rows get room before they exist, or are refused.

Eviction after a request (``memory.py``) alone lets a flood of new ids pass the budget by a
request's rows each time, and without any bound when the rows are protected (touched in the last
``ps.memory.eviction.protect_steps`` steps: every id of a flood sent at one step). So the store asks first:

    reserve(tables, table, n)        the store's admit, the table's lock held: room for n new rows
                                     of ``table`` is reserved under the budget (``release``d once
                                     they exist), or ``NeedRoom`` is raised before anything changed
    make_room(tables, room, step)    no table lock held (it takes each in turn, as eviction does):
                                     if what may leave RAM (rows not protected, a count filter's
                                     counts) can make room, it leaves and the store tries the request
                                     again; if not, ``StoreFull`` naming ps.memory.budget
                                     (RESOURCE_EXHAUSTED), and nothing has changed

With a disk tier nothing is refused: any row may go to it, protected ones too (a training request
brings a row back whole), so eviction after the request makes the room (``Memory.fit``).

Admission state is inside the budget: a count filter's counts decay (each halved, the ids seen
once forgotten: ``admission/count.py``) when the budget is passed and the filters hold more than
FILTER_SHARE of it, before any row leaves, and further when only protected rows are left. A Bloom
filter's counters are fixed bytes (they decay on their own, ``admission/bloom.py``), which must
leave the rows at least half of the budget.
"""

import math
import threading

from cardinal.ps.limits import StoreFull

LOW_WATER = 0.99     # a budget eviction frees down to this share of the budget
FILTER_SHARE = 0.25  # counting filters past this share of a passed budget decay before rows leave
INDEX_BYTES = 10     # bytes of hash index a new row may add (5-byte slots, loads 0.6-0.85, doubling)


class NeedRoom(Exception):
    """New rows would pass the budget: make room (no lock held), then try the request again."""

    def __init__(self, nbytes: int, table: str):
        super().__init__(f"{nbytes} bytes of new rows of table {table!r}")
        self.nbytes, self.table = nbytes, table


class Budget:
    def __init__(self, memory, admission: dict):
        """``memory``: the store's ``Memory`` (its budget, protection, eviction); ``admission``: the
        shard's tables' admission settings, table -> ``AdmissionConfig``."""
        self.memory = memory
        fixed = sum(c.bloom_bytes for c in admission.values() if c.policy == "bloom")
        if memory.budget and fixed > memory.budget / 2:
            raise ValueError(f"the bloom admission filters take {fixed} bytes on this server "
                             f"(ps.memory.admission.bloom_bytes per table), over half of ps.memory.budget "
                             f"({memory.budget} bytes for the tables): lower ps.memory.admission.bloom_bytes or raise "
                             "ps.memory.budget")
        self.reserved = 0  # bytes of rows being made (``reserve``)
        self._lock = threading.Lock()

    def reserve(self, tables: dict, table, n_new: int) -> int:
        """Reserve room for ``n_new`` new rows of ``table`` under the budget, or raise ``NeedRoom``; returns
        the bytes reserved, to ``release`` once the rows exist (requests on other tables reserve at the
        same time: each sees the others'). Rows of a table with a disk tier are always let in: eviction
        moves any row there after the request."""
        m = self.memory
        if not m.budget or n_new == 0 or table.tiered:
            return 0
        need = math.ceil(n_new * (m.row_cost(table) + INDEX_BYTES))
        with self._lock:
            if sum(t.nbytes for t in tables.values()) + self.reserved + need > m.budget:
                raise NeedRoom(need, table.config.name)
            self.reserved += need
        return need

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.reserved -= nbytes

    def make_room(self, tables: dict, room: NeedRoom, step: int) -> None:
        """Make ``room.nbytes`` of room under the budget for a request of ``step``, or raise ``StoreFull``
        having changed nothing."""
        m = self.memory
        with m.lock:
            total = sum(t.nbytes for t in tables.values()) + self.reserved
            over = total + room.nbytes - m.budget
            if over <= 0:
                return
            may_go = sum(m.free(tables, step).values()) + sum(t.admission.decayable_bytes for t in tables.values()
                                                             if t.admission is not None)
            if may_go < over:
                raise StoreFull(
                    f"ps.memory.budget is full: {room.nbytes} bytes of new rows of table {room.table!r} would pass "
                    f"its {m.budget} bytes for this shard's tables, and of the {total} bytes held only {int(may_go)} "
                    f"may leave RAM (the rest: rows touched in the last ps.memory.eviction.protect_steps = "
                    f"{m.config.protect_steps} steps, which may be in flight, and hash index and filter state); "
                    "nothing was created: send fewer new ids a step, raise ps.memory.budget, add shards or set "
                    "ps.memory.disk_budget")
            m.fit(tables, step, extra=room.nbytes + self.reserved)


def decay_filters(tables: dict, need: float, keep: float) -> int:
    """Decay counting admission filters, the largest first, while ``need`` bytes are still to be freed
    and they hold more than ``keep``; returns the bytes freed."""
    freed = 0
    while need - freed > 0:
        held = {name: t.admission.decayable_bytes for name, t in tables.items()
                if t.admission is not None and t.admission.decayable_bytes}
        if sum(held.values()) <= keep:
            break
        t = tables[max(held, key=held.get)]
        with t.lock:
            before = t.admission.nbytes
            t.admission.decay()
            freed += before - t.admission.nbytes
    return freed

