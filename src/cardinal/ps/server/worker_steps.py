"""What a shard knows of the workers' steps: their clocks, and one step's pushes held to combine.

Several workers train one model by each taking a share of every global batch. A push says
where it comes from (``Origin``, ``ps/transport/requests.py``): worker r of W, part k of the K
messages that carry this worker's push of one table and step to this shard (large pushes are
split on the wire), and whether to combine. Every worker pushes every table to every shard at every training step
(an empty push where its share has no ids there), so a shard can tell when a step is whole:

    clocks    per table and worker, the last step whose every part has been applied;
              ``clock(table, W)`` = the slowest worker's. A worker pulls rows for step t only
              once the clock is >= t - 1 - k (stale-synchronous, bound k; sync is k = 0).
    combine   a push is held until every worker's push of that table and step is in; then
              all of them are applied as one, in (worker, part) order, so W workers make one
              update per step and the result does not depend on arrival order. A push that
              runs more than ``MAX_AHEAD`` steps ahead of the slowest clock is refused.
              Counted pushes (a worker cache's pending sums) keep their counts beside their
              gradients; the workers' parts of a row are parts of one update, so the row
              takes the largest of their counts (``combined_counts``, then ``table.push``).

A push without an origin (one worker, GEO deltas) is applied at once and moves no clock.
"""

import threading
from dataclasses import dataclass, field

import numpy as np

from cardinal.ps.transport.requests import Origin

MAX_AHEAD = 64  # steps a push may run ahead of the slowest worker's clock (bounds what a shard holds)


@dataclass
class _Held:
    workers: int
    parts: dict[int, int] = field(default_factory=dict)       # worker -> parts it sends
    messages: dict[tuple[int, int], tuple] = field(default_factory=dict)  # (worker, part) -> (ids, grads, counts)
    staleness: int = 0


class WorkerSteps:
    """Clocks and held pushes of one shard (thread-safe). ``base``: the step every worker is
    taken to have finished (0, or the step of the checkpoint the shard loaded)."""

    def __init__(self, base: int = 0):
        self.base = base
        self._lock = threading.Lock()
        self._clock: dict[tuple[str, int], int] = {}            # (table, worker) -> last whole step
        self._parts: dict[tuple[str, int, int], int] = {}       # (table, worker, step) -> parts applied
        self._done: dict[tuple[str, int], set[int]] = {}        # whole steps past a gap, per (table, worker)
        self._held: dict[tuple[str, int], _Held] = {}            # (table, step) -> its parts so far

    def reset(self, base: int) -> None:
        """Forget every clock and held push (a checkpoint was loaded)."""
        with self._lock:
            self.__init__(base)

    def clock(self, table: str, workers: int) -> int:
        with self._lock:
            return min(self._clock.get((table, w), self.base) for w in range(workers))

    def clocks(self) -> dict[str, dict[str, int]]:
        """Every known clock, {table: {worker: step}} (the base applies to the others)."""
        with self._lock:
            out: dict[str, dict[str, int]] = {}
            for (table, w), step in sorted(self._clock.items()):
                out.setdefault(table, {})[str(w)] = step
            return out

    def held(self) -> dict[str, dict[str, list[int]]]:
        """Combined steps still waiting, {table: {step: [workers whose every part is in]}}: a
        worker missing from its step's list is the one the others wait for."""
        with self._lock:
            out: dict[str, dict[str, list[int]]] = {}
            for (table, step), h in sorted(self._held.items()):
                whole = [w for w, n in sorted(h.parts.items()) if sum(k[0] == w for k in h.messages) == n]
                out.setdefault(table, {})[str(step)] = whole
            return out

    def admit(self, table: str, step: int, origin: Origin) -> None:
        """Refuse a push of a step this worker's clock has passed (applied already), or of a step
        more than ``MAX_AHEAD`` past the slowest worker's clock (a shard holds only so much)."""
        with self._lock:
            mine = self._clock.get((table, origin.worker), self.base)
            if step <= mine:
                raise ValueError(f"push of step {step} by worker {origin.worker}: this shard has applied that "
                                 f"worker's pushes of table {table!r} up to step {mine} already (did another run "
                                 "use these servers? start fresh servers, or resume that run)")
            slowest = min(self._clock.get((table, w), self.base) for w in range(origin.workers))
            if step > slowest + MAX_AHEAD:
                raise ValueError(f"push of step {step} by worker {origin.worker}: more than {MAX_AHEAD} steps ahead "
                                 f"of the slowest of {origin.workers} workers (at step {slowest}) on table {table!r}")

    def hold(self, table: str, step: int, origin: Origin, ids: np.ndarray, grads: np.ndarray,
             counts: np.ndarray | None = None):
        """Keep one part of a combined push; once every worker's every part of the step is in,
        returns (the (ids, grads, counts) parts in (worker, part) order, the largest staleness any
        part carried), else None. The parts stay held until ``finish`` (applied) or ``withdraw``."""
        with self._lock:
            held = self._held.setdefault((table, step), _Held(origin.workers))
            if held.workers != origin.workers:
                raise ValueError(f"push of step {step}: workers disagree on their number "
                                 f"({held.workers} and {origin.workers})")
            if held.parts.setdefault(origin.worker, origin.parts) != origin.parts:
                raise ValueError(f"push of step {step}: worker {origin.worker} split it into "
                                 f"{held.parts[origin.worker]} parts and into {origin.parts}")
            if (origin.worker, origin.part) in held.messages:
                raise ValueError(f"push of step {step}: worker {origin.worker} sent part {origin.part} twice")
            held.messages[(origin.worker, origin.part)] = (np.array(ids), np.array(grads),
                                                           None if counts is None else np.array(counts))
            held.staleness = max(held.staleness, origin.staleness)
            if len(held.messages) < sum(held.parts.values()) or len(held.parts) < held.workers:
                return None
            return [held.messages[key] for key in sorted(held.messages)], held.staleness

    def withdraw(self, table: str, step: int, origin: Origin) -> None:
        """Drop one part again: its push was refused when the step was applied, and a refused
        push changes nothing (the other workers' parts stay held for its resend)."""
        with self._lock:
            held = self._held.get((table, step))
            if held is None:
                return
            held.messages.pop((origin.worker, origin.part), None)
            if not any(w == origin.worker for w, _ in held.messages):
                held.parts.pop(origin.worker, None)
            if not held.messages:
                del self._held[(table, step)]

    def senders(self, table: str, step: int) -> list[int]:
        """The worker of each held part of a whole step, in (worker, part) order (``hold``'s order)."""
        with self._lock:
            return [w for w, _ in sorted(self._held[(table, step)].messages)]

    def finish(self, table: str, step: int, workers: int) -> None:
        """A combined step was applied: its parts go, and every worker's clock passes it."""
        with self._lock:
            self._held.pop((table, step), None)
        for w in range(workers):
            self.applied(table, step, w, 1)

    def applied(self, table: str, step: int, worker: int, parts: int) -> None:
        """One part of ``worker``'s push of ``step`` was applied; the clock moves once every part
        of every step up to it has been."""
        with self._lock:
            key = (table, worker, step)
            self._parts[key] = self._parts.get(key, 0) + 1
            if self._parts[key] < parts:
                return
            del self._parts[key]
            done = self._done.setdefault((table, worker), set())
            done.add(step)
            clock = self._clock.get((table, worker), self.base)
            while clock + 1 in done:
                clock += 1
                done.discard(clock)
            self._clock[(table, worker)] = clock


def combined_counts(parts: list[tuple]) -> np.ndarray | None:
    """The counts of a combined step's parts, concatenated beside their ids (a part without
    counts is one update per row); None when no part carries counts, so uncounted steps stay
    uncounted. ``table.push`` then merges each row's counts by max."""
    if all(p[2] is None for p in parts):
        return None
    return np.concatenate([np.ones(len(p[0]), np.int32) if p[2] is None else p[2] for p in parts])
