"""``UpdateLog``: which rows each applied update changed, so workers' caches learn what went stale.

Per table, each update applied with an origin of several workers gets the next sequence
number and an entry: its step and, per worker that contributed, the unique ids it changed.
A push reply asks with a cursor (``Origin.since``, -1: nothing wanted) and carries back the
ids other workers changed after it:

    seq 7  step 12  worker 0: [3, 9]   worker 1: [9, 40]      (one combined step)
    since(cursor=6, worker=0)  ->  ids [40]  steps [12]  seqs [7]  counts [1]   cursor 7
                                   (9 was changed by worker 0 too: it counted that update itself)

``counts``: the training steps the update brought the row (a worker cache's pushed sum of k
brings k; a combined step's rows take the largest of their parts', as the optimizers do).

A row counts once per update (a combined step is one update). The log is bounded in entries
and in ids; a cursor older than what it holds is answered ``reset`` (the worker drops its
cached rows of this shard), as is one past its end (another incarnation's). Answers depend
only on the cursor and the log, so a resent push (same cursor) is answered alike, or with
more, never with less.
"""

import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

MAX_ENTRIES = 1024     # updates kept per table
MAX_IDS = 1 << 22      # ids kept per table, over all its entries


@dataclass
class _Entry:
    seq: int
    step: int
    ids: np.ndarray                      # unique ids changed (sorted)
    counts: np.ndarray                   # (len(ids),) int32: steps each row's update brought
    by_worker: dict[int, np.ndarray]     # worker -> the unique ids it contributed (sorted)


class UpdateLog:
    def __init__(self, max_entries: int = MAX_ENTRIES, max_ids: int = MAX_IDS):
        self.max_entries, self.max_ids = max_entries, max_ids
        self._lock = threading.Lock()
        self._entries: dict[str, deque[_Entry]] = {}
        self._seq: dict[str, int] = {}     # table -> the last sequence number given
        self._floor: dict[str, int] = {}   # table -> cursors below this are reset
        self._ids: dict[str, int] = {}     # table -> ids held

    def append(self, table: str, step: int, parts: list[tuple]) -> None:
        """One applied update of ``step``: (worker, ids[, counts]) of each part that made it."""
        by_worker: dict[int, list[np.ndarray]] = {}
        for worker, ids, *_ in parts:
            by_worker.setdefault(worker, []).append(ids)
        mine = {w: np.unique(np.concatenate(a)) for w, a in by_worker.items()}
        all_ids = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        all_counts = np.concatenate([np.ones(len(p[1]), np.int32) if len(p) < 3 or p[2] is None
                                     else np.asarray(p[2], np.int32) for p in parts]) if parts \
            else np.zeros(0, np.int32)
        ids, inverse = np.unique(all_ids, return_inverse=True)
        counts = np.ones(len(ids), np.int32)
        np.maximum.at(counts, inverse, all_counts)
        with self._lock:
            seq = self._seq[table] = self._seq.get(table, 0) + 1
            entries = self._entries.setdefault(table, deque())
            entries.append(_Entry(seq, step, ids, counts, mine))
            self._ids[table] = self._ids.get(table, 0) + len(ids)
            while len(entries) > self.max_entries or (self._ids[table] > self.max_ids and len(entries) > 1):
                old = entries.popleft()
                self._ids[table] -= len(old.ids)
                self._floor[table] = old.seq

    def since(self, table: str, cursor: int, worker: int, clock: int) -> dict:
        """Updates after ``cursor`` by workers other than ``worker``: {"ids", "steps", "seqs",
        "counts"} ((n,) int64 each), "cursor" (the newest seq), "reset", and "clock" (the shard's
        clock, read by the caller before this call: every update of steps <= clock is in the log)."""
        with self._lock:
            seq = self._seq.get(table, 0)
            reset = cursor < self._floor.get(table, 0) or cursor > seq
            chosen = [] if reset else [e for e in self._entries.get(table, ()) if e.seq > cursor]
            parts = []
            for e in chosen:
                theirs = np.ones(len(e.ids), bool) if worker not in e.by_worker else \
                    ~np.isin(e.ids, e.by_worker[worker], assume_unique=True)
                parts.append((e.ids[theirs], e.step, e.seq, e.counts[theirs]))
        ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        steps = np.concatenate([np.full(len(p[0]), p[1], np.int64) for p in parts]) if parts else ids.copy()
        seqs = np.concatenate([np.full(len(p[0]), p[2], np.int64) for p in parts]) if parts else ids.copy()
        counts = np.concatenate([p[3] for p in parts]).astype(np.int64) if parts else ids.copy()
        return {"ids": ids.astype(np.int64), "steps": steps, "seqs": seqs, "counts": counts, "cursor": seq,
                "reset": reset, "clock": clock}

    def reset(self) -> None:
        """Forget every entry (a checkpoint was loaded): every older cursor is answered reset."""
        with self._lock:
            for table in self._seq:
                self._floor[table] = self._seq[table]
            self._entries.clear()
            self._ids.clear()
