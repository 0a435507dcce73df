"""What a request leaves for later (eviction, demotion to the disk tier), run on a thread of its
own once the reply is out.

With a disk tier a request that passes the budget demotes rows after it: writes to RocksDB, index
removals, the policy's scores over every RAM row, as long as the request itself or longer. Run
inline, a pull's demotions are on the step's path: the worker waits for rows it already has. So the
store hands them here and replies; the worker computes while they run. The next request to the
store (and anything that reads its tables: stats, checkpoints) first waits for what is pending, so
the store changes in the order it did inline, each request seeing the tables its predecessor's
eviction left: the same bits, the same budget between requests, whatever the timing.
"""

import threading
from concurrent.futures import Future, ThreadPoolExecutor


class Aftercare:
    def __init__(self, name: str):
        self._name = name
        self._pool: ThreadPoolExecutor | None = None  # made at the first job
        self._pending: Future | None = None
        self._lock = threading.Lock()

    def later(self, fn) -> None:
        """Run ``fn()`` on the aftercare thread, after anything handed here before."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix=self._name)
            self._pending = self._pool.submit(fn)

    def wait(self) -> None:
        """Return once everything handed here has run, raising what it raised, once: the request
        that waits is told (e.g. a full disk tier) and the next one tries the store afresh, as a
        request whose own inline eviction failed left it."""
        with self._lock:
            pending = self._pending
        if pending is None:
            return
        try:
            pending.result()
        finally:
            with self._lock:
                if self._pending is pending:
                    self._pending = None

    def close(self) -> None:
        self.wait()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown()
