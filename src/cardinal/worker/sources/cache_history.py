"""What happened to one table's rows while a cache's pulls were in flight.

A pull's rows are cached when its reply arrives, but by then this worker may have pushed more of
their gradients, and other workers' updates may have been reported (the update log of a push
reply): the rows are that many updates behind already. ``History`` remembers the last HISTORY of
each, numbered, so a pull marks where it started (``mark``) and its reply counts what came after
(``behind``). When the window no longer reaches back to the mark, nobody can tell how far behind
the rows are, and they are not cached (``behind`` gives None).
"""

from collections import deque

import numpy as np

HISTORY = 32  # events (own pushes, log reports) remembered for pulls still in flight
UNSENT = np.iinfo(np.int64).max  # the step of an evicted row's gradients: in some later push


class History:
    def __init__(self):
        self.events: deque = deque(maxlen=HISTORY)  # log reports: (n, ids, steps, counts); ids None: a reset
        self.n_events = 0
        self.own: deque = deque(maxlen=HISTORY)     # own pushes: (sorted ids, their counts, step)
        self.applied = -1                           # own pushes of steps <= this are applied

    def mark(self) -> tuple[int, int]:
        """Where a pull sent now starts: (log reports so far, own steps known applied)."""
        return self.n_events, self.applied

    def pushed(self, ids: np.ndarray, counts: np.ndarray, step: int) -> None:
        """An own push of ``step`` (UNSENT: evicted rows' sums, in some later push)."""
        order = np.argsort(ids, kind="stable")
        self.own.append((ids[order], counts[order], step))

    def reported(self, ids: np.ndarray | None, steps: np.ndarray | None, counts: np.ndarray | None = None) -> None:
        """Other workers' updates a reply reported (``ids`` None: the log was reset)."""
        self.n_events += 1
        self.events.append((self.n_events, ids, steps, counts))

    def behind(self, ids: np.ndarray, seen: int, since: tuple[int, int]) -> np.ndarray | None:
        """Updates the fetched rows of ``ids`` may lack: own pushes not known applied when the pull
        was sent (built, in flight, or evicted rows' sums not sent yet), and updates by others
        reported since, of steps > ``seen``. None when the history no longer reaches back."""
        reported, applied = since
        if len(self.own) == self.own.maxlen and self.own[0][2] > applied:
            return None  # own pushes the pull may have missed fell out of the history
        events = [e for e in self.events if e[0] > reported]
        if self.n_events - reported > len(events):
            return None
        behind = np.zeros(len(ids), np.int32)
        for pushed, counts, step in self.own:
            if step > applied:
                at = np.minimum(np.searchsorted(pushed, ids), max(len(pushed) - 1, 0))
                found = pushed[at] == ids if len(pushed) else np.zeros(len(ids), bool)
                behind[found] += counts[at[found]]
        for _, event_ids, steps, counts in events:
            if event_ids is None:
                return None  # a reset of the log: start afresh
            later = steps > seen
            sub_ids, inverse = np.unique(event_ids[later], return_inverse=True)  # an id may be in several updates
            sub_counts = np.zeros(len(sub_ids), np.int64)
            np.add.at(sub_counts, inverse, counts[later])
            at = np.minimum(np.searchsorted(sub_ids, ids), max(len(sub_ids) - 1, 0))
            found = sub_ids[at] == ids if len(sub_ids) else np.zeros(len(ids), bool)
            behind[found] += sub_counts[at[found]].astype(np.int32)
        return behind

    def clear(self, applied: int) -> None:
        """A flush: nothing in flight, own pushes of steps <= ``applied`` applied."""
        self.events.clear()
        self.n_events = 0
        self.own.clear()
        self.applied = applied
