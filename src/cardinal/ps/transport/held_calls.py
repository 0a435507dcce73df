"""A call each client holds open to each server, so that gRPC Python starts the thread that
completes a channel's calls once, not for every call.

gRPC Python completes a channel's calls (``future()``) on a thread it starts when a call begins
with none in flight on that channel, and which ends with the last one. A client that sends a
pull, waits for it and sends the next (a training step's pattern, and the loopback benchmark's)
started a thread for every call: ~150 us of the client's CPU a call (``Thread.start`` waits
until the new thread runs), and on busy cores a wait for one to run it. So a client holds one
call open on each channel (``Hold``): a stream its server never writes to.

The server answers a hold without a thread (gRPC's non-blocking stream handler: once the
handler returned, the call holds no thread and counts against no call limit) and ends every
hold when it stops (``Held.end``), so that no client's hold keeps a stopping server waiting out
its grace period. Only a job's clients may hold one (its token, as for every call). A server
from before ``Hold`` answers UNIMPLEMENTED and calls to it start their thread as before; a hold
that ended (its server stopped, the connection broke) is opened again by the next call.
"""

import threading

import grpc

METHOD = "Hold"
AGAIN = (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE)  # a hold that ended so is opened again


class Holds:
    """A client's holds, one a channel: ``keep(shard)`` before each call opens that channel's
    hold again when it ended, unless its server has none or refused it."""

    def __init__(self, channels: list[grpc.Channel], service: str, metadata):
        self._methods = [ch.unary_stream(f"/{service}/{METHOD}") for ch in channels]
        self._calls: list = [None] * len(channels)  # None: none yet; False: none to hold
        self._metadata, self._lock = metadata, threading.Lock()

    def keep(self, shard: int) -> None:
        call = self._calls[shard]
        if call is False or (call is not None and not call.done()):
            return
        with self._lock:
            call = self._calls[shard]
            if call is False or (call is not None and not call.done()):
                return
            if call is not None and call.code() not in AGAIN:
                self._calls[shard] = False
                return
            self._calls[shard] = self._methods[shard](b"", metadata=self._metadata)

    def close(self) -> None:
        with self._lock:
            for call in self._calls:
                if call:
                    call.cancel()
            self._calls = [False] * len(self._calls)


class Held:
    """A server's open holds: ``add`` one (from the method's handler), ``end`` them all."""

    def __init__(self):
        self._ends: set = set()
        self._ended, self._lock = False, threading.Lock()

    def add(self, end, context: grpc.ServicerContext) -> None:
        """Hold the call whose stream ``end(None)`` ends, until ``end()`` or its client goes."""
        with self._lock:
            if not self._ended:
                self._ends.add(end)
                if context.add_callback(lambda: self._discard(end)):
                    return
                self._ends.discard(end)  # it ended already
        end(None)

    def _discard(self, end) -> None:
        with self._lock:
            self._ends.discard(end)

    def end(self) -> None:
        """End every hold, and every one that comes after (the server is stopping)."""
        with self._lock:
            self._ended, ends = True, list(self._ends)
            self._ends.clear()
        for end in ends:
            end(None)
