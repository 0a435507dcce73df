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
        self._state = threading.Lock()    # guards _queued
        self._queued = 0                  # requests handed to the thread and not yet finished

    def run(self, what: str, fn, *args, **kwargs) -> Handle:
        if self.inline:
            with self._state:
                here = self._queued == 0 and self._running.acquire(blocking=False)
                if not here:
                    self._queued += 1
            if here:
                try:
                    return Completed.run(fn, *args, **kwargs)
                finally:
                    self._running.release()
            return FutureHandle(self._thread.submit(self._queued_run, fn, *args, **kwargs), what)
        return FutureHandle(self._thread.submit(fn, *args, **kwargs), what)

    def _queued_run(self, fn, *args, **kwargs):
        try:
            with self._running:
                return fn(*args, **kwargs)
        finally:
            with self._state:
                self._queued -= 1

    def close(self) -> None:
        self._thread.shutdown(wait=True)
