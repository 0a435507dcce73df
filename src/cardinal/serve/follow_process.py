"""A ``Follower`` whose reloads are read in a child process at the lowest CPU priority.

    follower = FollowerProcess(RUN_DIR)   # what ``cardinal serve --follow`` uses: Follower's interface
    new = follower.next_model(current)    # prepared there, applied here

A reload read in the serving process (chain verified, files read, rows decoded, tables built, dense
weights loaded: ~100 ms of Python) shares the interpreter lock with the requests: each of their
many hand-offs waits out a switch interval, and the requests of a reload's span came back 3-5x
slower at p99. Here a child process does ``Follower.prepare`` and sends back the ``Prepared``
arrays; the server only applies them (``Prepared.apply``). The child runs at nice 19, so on busy
cores the server's and its clients' threads go first. A child that dies is a failed reload, and
the next reload starts another; ``stop`` (set on SIGTERM) ends the child and the reload under way.
"""

import os
import pickle
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path

from cardinal.serve.follow import Follower, Served, warm_apply
from cardinal.serve.model import ServingModel

POLL_S = 0.05  # how often a reload waiting on the child looks at ``stop``


class FollowerProcess:
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.stop = threading.Event()
        self._child = self._conn = None

    def warm(self, current: ServingModel) -> None:
        """The child started and warm (``Follower.warm``'s reading half), and this process's half too."""
        self._ask("warm_prepare", Served.of(current))
        warm_apply(current)

    def next_model(self, current: ServingModel) -> ServingModel | None:
        prepared = self._ask("prepare", Served.of(current))
        return None if prepared is None else prepared.apply(current)

    def close(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            self._conn.close()
            self._child = self._conn = None

    def _ask(self, what: str, served: Served):
        if self._child is None or self._child.poll() is not None:
            self.close()
            self._start()
        try:
            self._conn.send((what, served))
            while not self._conn.poll(POLL_S):
                if self.stop.is_set():
                    self.close()
                    return None
            ok, reply = self._conn.recv()
        except (EOFError, OSError):
            self.close()
            raise RuntimeError("the process reading the reload died; the next reload starts another") from None
        if not ok:
            raise reply
        return reply

    def _start(self) -> None:
        here, there = socket.socketpair()
        self._child = subprocess.Popen([sys.executable, "-m", __name__, str(there.fileno()), str(self.run_dir)],
                                       pass_fds=[there.fileno()])
        there.close()
        self._conn = Connection(here.detach())


def _serve(conn: Connection, run_dir: Path) -> None:
    """The child: a ``Follower`` answering the server's requests until the connection closes."""
    follower = None
    while True:
        try:
            what, served = conn.recv()
        except EOFError:
            return
        try:
            follower = follower or Follower(run_dir)
            reply = (True, getattr(follower, what)(served))
        except Exception as e:  # the server logs it as a failed reload; this child goes on
            reply = (False, _sendable(e))
        conn.send(reply)


def _sendable(e: Exception) -> Exception:
    """``e`` if it survives a trip through pickle as itself, else a RuntimeError with its message."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    os.setpriority(os.PRIO_PROCESS, 0, 19)  # the lowest, whatever the server's
    _serve(Connection(int(sys.argv[1])), Path(sys.argv[2]))
