"""``PSSource``: rows pulled from the parameter servers, gradients pushed from a thread.

    backward hook ──push()──> push thread: route, send ──> at most max_in_flight unacknowledged
    settle(k) ── waits for the pushes of steps <= k (in step order: pushes are sent in order)

Pushes go out from one thread so backward never waits on the network; the window bounds the
memory and the staleness a slow server can build up. ``settle`` waits for acknowledgements,
not for queue order, so what it promises holds over any transport.

One worker of several (``workers > 1``): every push carries its origin (``ps/server/worker_steps.py``)
and goes to every shard, and ``settle(k)`` also waits until every worker's pushes of steps
<= k are applied, by the servers' clocks (read from push replies, or asked for while waiting):
no worker runs more than the collection's staleness bound ahead of the slowest (stale-
synchronous; sync is bound 0). With ``combine`` the servers apply one step's pushes of all
workers as one update. A worker that waits too long names the worker it waits for and the
shard. Each table is pushed once per step (a second push of a step is refused).

Staleness is measured at each training pull: the steps of updates, by any worker, that the
rows cannot reflect (step - 1 - the clock known then). ``staleness_counts`` holds how often
each value was seen; with ``compensate`` a push asks the servers to divide its learning rate
by the staleness of the rows it was computed from.
"""

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from cardinal.ps.client.client import PSClient
from cardinal.ps.transport.base import DEFAULT_TIMEOUT, FutureHandle, Handle
from cardinal.ps.transport.requests import Origin
from cardinal.worker.sources.base import RowSource

POLL_S = (0.0005, 0.01)  # first and longest pause between two looks at the servers' clocks


class PSSource(RowSource):
    def __init__(self, client: PSClient, max_in_flight: int = 4, timeout: float = DEFAULT_TIMEOUT, *,
                 worker: int = 0, workers: int = 1, combine: bool = False, compensate: bool = False):
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if not 0 <= worker < workers:
            raise ValueError(f"worker must be in [0, {workers}), got {worker}")
        self.client, self.max_in_flight, self.timeout = client, max_in_flight, timeout
        self.worker, self.workers, self.combine, self.compensate = worker, workers, combine, compensate
        self._pushes: list[tuple[int, Handle]] = []  # (step, push) sent, not yet acknowledged
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="cardinal-push")
        self._sending: list[Handle] = []             # handed to the push thread, not yet sent
        self._pushed: int | None = None              # the last step this worker pushed
        self._clock: dict[str, int] = {}             # table -> the slowest worker's clock, as last known
        self._pulled: dict[tuple[str, int], int] = {}  # (table, step) -> staleness of the rows pulled
        self._last: dict[str, int] = {}              # table -> the step of its last push
        self.staleness_counts: Counter[int] = Counter()
        self.on_reply = None  # called (table, reply) with each push reply that carries an update log (a cache)

    def pull(self, table: str, ids: np.ndarray, *, create: bool, step: int) -> Handle:
        if create:
            staleness = max(0, step - 1 - self._known_clock(table, step))
            self.staleness_counts[staleness] += 1
            self._pulled[(table, step)] = staleness
        return self.client.pull(table, ids, create=create, step=step)

    def _known_clock(self, table: str, step: int) -> int:
        if self.workers > 1:
            if table not in self._clock:  # first pull of the table: ask where the servers' clocks stand
                self._clock[table] = self.client.clocks(self.workers, self.timeout)[table][0]
            return self._clock[table]
        # one worker: its pushes are its clock; those of steps before the oldest unacknowledged are applied
        oldest = [s for s, _ in self._pushes[:1]]
        return oldest[0] - 1 if oldest else self._pushed if self._pushed is not None else step - 1

    def clock(self, table: str) -> int:
        """The step up to which every worker's pushes of ``table`` are known applied on every shard."""
        return self._clock.get(table, -1)

    def push(self, table: str, ids: np.ndarray, grads: np.ndarray, *, step: int,
             counts: np.ndarray | None = None, since: list[int] | None = None) -> None:
        """``since``: per shard, the update log position after which the reply should report
        other workers' updates (``ps/server/update_log.py``; a cache asks), None for none."""
        if self.workers > 1 and self._last.get(table, -1) >= step:
            raise ValueError(f"a second push of table {table!r} at step {step}: with several workers each table is "
                             "pushed once per step (pool every field of a table in one call of the collection, and "
                             "advance its .step every step)")
        self._last[table] = step
        staleness = self._pulled.pop((table, step), 0)
        origin = None
        if self.workers > 1:
            origin = Origin(self.worker, self.workers, combine=self.combine,
                            staleness=staleness if self.compensate else 0)
        self._pushed = step if self._pushed is None else max(self._pushed, step)
        sending = self._sender.submit(self._send, table, ids, grads, step, origin, counts, since)
        self._sending.append(FutureHandle(sending, f"worker {self.worker}'s push of table {table!r} at step {step}"))

    def _send(self, table: str, ids: np.ndarray, grads: np.ndarray, step: int, origin: Origin | None,
              counts: np.ndarray | None, since: list[int] | None = None) -> None:
        """On the push thread: route and send one push, keeping at most max_in_flight unacknowledged."""
        while len(self._pushes) >= self.max_in_flight:
            self._acknowledged(*self._pushes.pop(0))
        extra = {} if counts is None else {"counts": counts}  # only a counted push names them
        if since is not None:
            extra["since"] = since
        self._pushes.append((step, _Tagged(table, self.client.push(table, ids, grads, step=step, origin=origin,
                                                                   **extra))))

    def _acknowledged(self, step: int, push: "_Tagged") -> None:
        reply = push.handle.wait(self.timeout)
        if "clock" in reply:
            self._clock[push.table] = max(self._clock.get(push.table, -1), reply["clock"])
        if "log" in reply and self.on_reply is not None:
            self.on_reply(push.table, reply)

    def settle(self, up_to_step: int | None) -> None:
        while self._sending:
            self._sending.pop(0).wait(self.timeout)  # an embedded shard's push may run on the push thread
        while self._pushes and (up_to_step is None or self._pushes[0][0] <= up_to_step):
            self._acknowledged(*self._pushes.pop(0))
        target = self._pushed if up_to_step is None else up_to_step  # None: up to this worker's last push
        if self.workers > 1 and target is not None:  # every worker's pushes too, by the servers' clocks
            self._await_clocks(target)

    def _await_clocks(self, step: int) -> None:
        """Until every worker's pushes of steps <= ``step`` are applied on every shard."""
        deadline, pause = time.monotonic() + self.timeout, POLL_S[0]
        tables = {t for t, _ in self._pulled} | set(self._clock)
        while behind := [t for t in sorted(tables) if self._clock.get(t, -1) < step]:
            clocks = self.client.clocks(self.workers, self.timeout)  # one look at every shard, every table
            for t in behind:
                self._clock[t] = max(self._clock.get(t, -1), clocks[t][0])
            late = [t for t in behind if clocks[t][0] < step]
            if not late:
                return
            if time.monotonic() > deadline:
                clock, culprit, shard = clocks[late[0]]
                raise TimeoutError(f"worker {self.worker} waited {self.timeout} s for step {step} of table "
                                   f"{late[0]!r}: shard {shard} has every worker's pushes only up to step {clock}, "
                                   f"and waits for worker {culprit} (is it slow, stopped, or started with other "
                                   "settings?)")
            time.sleep(pause)
            pause = min(2 * pause, POLL_S[1])

    def flush(self, step: int) -> None:
        self.settle(None)  # nothing is held here: every push was handed to the push thread


class _Tagged(Handle):
    """A push handle and its table (whose clock its reply carries)."""

    def __init__(self, table: str, handle: Handle):
        self.table, self.handle = table, handle

    def wait(self, timeout=DEFAULT_TIMEOUT):
        return self.handle.wait(timeout)
