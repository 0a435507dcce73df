"""``PSSource``: rows pulled from the parameter servers, gradients pushed from a thread.

    backward hook ──push()──> push thread: route, send ──> at most max_in_flight unacknowledged
    settle(k) ── waits for the pushes of steps <= k (in step order: pushes are sent in order)

Pushes go out from one thread so backward never waits on the network; the window bounds the
memory and the staleness a slow server can build up. ``settle`` waits for acknowledgements,
not for queue order, so what it promises holds over any transport.
"""

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from cardinal.ps.client import PSClient
from cardinal.ps.transport.base import DEFAULT_TIMEOUT, Handle
from cardinal.worker.sources.base import RowSource


class PSSource(RowSource):
    def __init__(self, client: PSClient, max_in_flight: int = 4, timeout: float = DEFAULT_TIMEOUT):
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.client, self.max_in_flight, self.timeout = client, max_in_flight, timeout
        self._pushes: list[tuple[int, Handle]] = []  # (step, push) sent, not yet acknowledged
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="cardinal-push")
        self._sending: list[Future] = []             # handed to the push thread, not yet sent

    def pull(self, table: str, ids: np.ndarray, *, create: bool, step: int) -> Handle:
        return self.client.pull(table, ids, create=create, step=step)

    def push(self, table: str, ids: np.ndarray, grads: np.ndarray, *, step: int) -> None:
        self._sending.append(self._sender.submit(self._send, table, ids, grads, step))

    def _send(self, table: str, ids: np.ndarray, grads: np.ndarray, step: int) -> None:
        """On the push thread: route and send one push, keeping at most max_in_flight unacknowledged."""
        while len(self._pushes) >= self.max_in_flight:
            self._pushes.pop(0)[1].wait(self.timeout)
        self._pushes.append((step, self.client.push(table, ids, grads, step=step)))

    def settle(self, up_to_step: int | None) -> None:
        while self._sending:
            self._sending.pop(0).result(self.timeout)
        while self._pushes and (up_to_step is None or self._pushes[0][0] <= up_to_step):
            self._pushes.pop(0)[1].wait(self.timeout)

    def flush(self, step: int) -> None:
        self.settle(None)  # nothing is held here: every push was handed to the push thread
