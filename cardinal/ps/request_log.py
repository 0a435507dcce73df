"""Exactly-once requests: a store remembers the request ids it applied.

A request can arrive twice: the network duplicated it, or the client sent it again after
losing the reply. A pull seen before is answered without counting the sighting again, and
a push seen before is acknowledged without being applied again. While the first attempt is
still running, a duplicate waits for it; if the first attempt failed, the duplicate is told
to send again. The last ``capacity`` ids are remembered.
"""

import threading
from collections import OrderedDict
from collections.abc import Callable


class FirstAttemptFailed(RuntimeError):
    """A duplicate of a request whose first attempt failed: send it again."""


class RequestLog:
    def __init__(self, capacity: int = 100_000):
        self.capacity = capacity
        self._seen: OrderedDict[str, threading.Event] = OrderedDict()
        self._lock = threading.Lock()

    def run(self, request_id: str | None, apply: Callable, replay: Callable):
        """``apply()`` the first time ``request_id`` is seen, ``replay()`` after that."""
        if request_id is None:
            return apply()
        with self._lock:
            done = self._seen.get(request_id)
            first = done is None
            if first:
                self._seen[request_id] = done = threading.Event()
        if not first:
            done.wait()
            with self._lock:
                if request_id not in self._seen:
                    raise FirstAttemptFailed(f"request {request_id}: the first attempt failed; send it again")
            return replay()
        try:
            result = apply()
        except BaseException:
            with self._lock:
                self._seen.pop(request_id, None)  # not applied: a resend may apply it
            done.set()
            raise
        done.set()
        with self._lock:
            while len(self._seen) > self.capacity:
                self._seen.popitem(last=False)
        return result
