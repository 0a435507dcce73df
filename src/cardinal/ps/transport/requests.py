"""What a pull and a push carry to one shard: a frozen object each, which the client builds and
every transport takes whole. A field is added here, once, and read where it is used: the
in-process transport hands it to the store, the gRPC one writes it into the header (``wire.py``).

A push says who sent it (``Origin``): worker r of W, part k of the K messages that carry it; the
servers combine several workers' steps by it (``ps/server/worker_steps.py``).
"""

from dataclasses import dataclass, replace

import numpy as np

MAX_WORKERS = 4096
MAX_PARTS = 1 << 20


@dataclass(frozen=True)
class Origin:
    """Who sent a push. ``staleness``: steps of other updates the gradient's rows had not seen
    when they were pulled (measured by the worker); the server may scale its step by it.
    ``since``: the update log position after which the reply reports other workers' updates
    (a worker cache asks; ``ps/server/update_log.py``), -1 for none."""

    worker: int = 0
    workers: int = 1
    part: int = 0
    parts: int = 1
    combine: bool = False
    staleness: int = 0
    since: int = -1

    def __post_init__(self):
        for name in ("worker", "workers", "part", "parts", "staleness", "since"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"origin.{name} must be an int, got {type(value).__name__}")
        if not isinstance(self.combine, bool):
            raise TypeError(f"origin.combine must be a bool, got {type(self.combine).__name__}")
        if not 1 <= self.workers <= MAX_WORKERS or not 0 <= self.worker < self.workers:
            raise ValueError(f"origin: worker {self.worker} of {self.workers} (workers must be in [1, {MAX_WORKERS}])")
        if not 1 <= self.parts <= MAX_PARTS or not 0 <= self.part < self.parts:
            raise ValueError(f"origin: part {self.part} of {self.parts} (parts must be in [1, {MAX_PARTS}])")
        if not 0 <= self.staleness < 1 << 31:
            raise ValueError(f"origin.staleness must be in [0, 2**31), got {self.staleness}")
        if not -1 <= self.since < 1 << 62:
            raise ValueError(f"origin.since must be in [-1, 2**62), got {self.since}")

    def split(self, k: int, n: int) -> "Origin":
        """This origin as part k of n messages (only the first asks for the update log)."""
        return Origin(self.worker, self.workers, k, n, self.combine, self.staleness, self.since if k == 0 else -1)


@dataclass(frozen=True, eq=False)
class PullRequest:
    """``ShardStore.pull`` of ``ids`` (n,) int64 in the stored table ``table`` (a table, a piece
    of one, or its copies of hot rows: ``sharding/plan.py``); ``create``: a training pull, whose
    new ids get rows, else a lookup. The rows cross as ``codec`` carries them (``cardinal.codecs``)."""

    table: str
    ids: np.ndarray
    create: bool
    step: int
    request_id: str | None = None
    codec: str = "fp32"

    def part(self, table: str, pos: np.ndarray, request_id: str) -> "PullRequest":
        """The ids at ``pos``, from the stored table ``table``, as request ``request_id``."""
        return replace(self, table=table, ids=_take(self.ids, pos), request_id=request_id)


@dataclass(frozen=True, eq=False)
class PushRequest:
    """``ShardStore.push`` of ``grads`` (n, dim) float32 for ``ids``, as ``codec`` carries them.
    ``kind``: "grad", "delta" or "replica" (``ps/validate.py``); ``origin``: who sent it, for a
    push of one worker of several; ``counts``: (n,) int32 >= 1, the updates each gradient row
    holds, or None (one each)."""

    table: str
    ids: np.ndarray
    grads: np.ndarray
    step: int
    kind: str = "grad"
    request_id: str | None = None
    origin: Origin | None = None
    codec: str = "fp32"
    counts: np.ndarray | None = None

    def part(self, table: str, pos: np.ndarray, columns: tuple[int, int] | None, request_id: str,
             origin: Origin | None) -> "PushRequest":
        """The rows at ``pos`` (their ``columns``, all when None), to the stored table ``table``,
        as request ``request_id`` with ``origin``."""
        grads = _take(self.grads, pos) if columns is None else self.grads[pos, slice(*columns)]
        return replace(self, table=table, ids=_take(self.ids, pos), grads=grads, request_id=request_id, origin=origin,
                       counts=None if self.counts is None else _take(self.counts, pos))


def _take(a: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``a[pos]``, or ``a`` itself when ``pos`` takes every row: a part's positions increase (a stable
    split, ``ps/client/parts.py``), so that is each row in order, and a request one shard holds whole
    is sent without a copy of its ids and rows (on the push thread, under the GIL the step's thread
    waits for)."""
    return a if len(pos) == len(a) else a[pos]
