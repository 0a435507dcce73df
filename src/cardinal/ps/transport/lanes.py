"""``Lane``: one thread that runs the requests sent to it in the order sent.

``inline=True``: a request sent while the lane has nothing queued or running runs at once on
the sender's thread, and only requests that find it busy wait for its thread. The order holds
either way (a queued request waits for the one running on a sender's thread), and so do the
bits; what is saved is the hand-off: waking the lane's thread, and on few cores the two threads
taking the interpreter from each other, for every small request. A sender that wanted its request
to overlap its own work (a prefetched pull) waits for it instead; the push thread, which only
sends, never minds.
"""

import threading
from concurrent.futures import ThreadPoolExecutor

from cardinal.ps.transport.base import Completed, FutureHandle, Handle


class Lane:
    def __init__(self, name: str, inline: bool = False):
        self.name, self.inline = name, inline
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._running = threading.Lock()  # held while one of this lane's requests runs, wherever it runs
        self._state = threading.Lock()    # guards _queued and _closed
        self._queued = 0                  # requests handed to the thread and not yet finished
        self._closed = False

    def run(self, what: str, fn, *args, **kwargs) -> Handle:
        if self._here():
            try:
                return Completed.run(fn, *args, **kwargs)
            finally:
                self._running.release()
        try:
            return FutureHandle(self._thread.submit(self._queued_run, fn, *args, **kwargs), what)
        except BaseException:
            self._done()
            raise

    def _here(self) -> bool:
        """Whether the request runs on the sender's thread (then holding ``_running``); else it is
        counted as queued. Refused once the lane is closed."""
        with self._state:
            if self._closed:
                raise RuntimeError(f"{self.name} is closed")
            if self.inline and self._queued == 0 and self._running.acquire(blocking=False):
                return True
            self._queued += 1
            return False

    def _queued_run(self, fn, *args, **kwargs):
        try:
            with self._running:
                return fn(*args, **kwargs)
        finally:
            self._done()

    def _done(self) -> None:
        with self._state:
            self._queued -= 1

    def close(self) -> None:
        """Refuses new requests, then waits for every request sent, wherever it runs."""
        with self._state:
            self._closed = True
        self._thread.shutdown(wait=True)
        with self._running:  # a request running on its sender's thread
            pass
