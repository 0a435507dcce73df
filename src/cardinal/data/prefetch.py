"""Read batches on a background thread while the training thread trains on earlier ones.

    for batch in prefetched(reader):        # the reader runs ahead by at most ``depth`` batches
        train(batch)

Parsing and batch assembly are compiled kernels that release the GIL (``tsv_kernels``), so
the reader's thread overlaps the step for real. What the consumer sees does not change: the
same batches in the same order, and an error the reader raised (a bad-rows ``ValueError``
included) raised here at the same point, after every batch read before it. A consumer that
stops early (``break``, an exception, or dropping the iterator) stops the thread: closing the
generator sets a flag the thread checks between batches and while it waits for room in the
queue, and the close waits for it to go, with a deadline.
"""

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

DEPTH = 2
POLL_S = 0.05       # how often a blocked thread looks at the stop flag
STOP_WAIT_S = 30.0  # how long closing waits for the thread (a batch being parsed finishes first)

_DONE = object()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def prefetched(items: Iterable[T], depth: int = DEPTH) -> Iterator[T]:
    """``items``, read ahead on a thread by at most ``depth`` (>= 1) items. The thread starts
    at the first ``next`` (an iterator never started holds no thread)."""
    if depth < 1:
        raise ValueError(f"prefetch depth must be >= 1, got {depth}")
    return _read_ahead(iter(items), depth)  # iter() here: an error in it shows here, as without prefetching


def _read_ahead(source: Iterator[T], depth: int) -> Iterator[T]:
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in source:
                if not put(item):
                    return
        except BaseException as error:  # handed to the consumer, raised there
            put(_Failed(error))
            return
        finally:
            getattr(source, "close", lambda: None)()  # a generator left early runs its finally here
        put(_DONE)

    thread = threading.Thread(target=read, name="cardinal-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            try:
                item = q.get(timeout=POLL_S)
            except queue.Empty:  # reading a batch may take long; a thread gone without a last item is a bug
                if not thread.is_alive() and q.empty():
                    raise RuntimeError("the prefetch thread ended without handing over a last item") from None
                continue
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join(STOP_WAIT_S)
