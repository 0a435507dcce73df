"""A ``Follower`` whose reloads are read in a child process at the lowest CPU priority.

    follower = FollowerProcess(RUN_DIR)   # what ``cardinal serve --follow`` uses: Follower's interface
    new = follower.next_model(current)    # prepared there, applied here

A reload read in the serving process (chain verified, files read, rows decoded, tables built, dense
weights loaded: ~100 ms of Python) shares the interpreter lock with the requests: each of their
many hand-offs waits out a switch interval, and the requests of a reload's span came back 3-5x
slower at p99. Here a child process does ``Follower.prepare``, and more: it holds the served
tables (``Mirror``: sent once when it starts, in shared memory, ``shared.py``), merges each delta
into their recent rows and folds them in itself, and sends back the finished arrays as shared
memory; the server maps them and swaps references (``Prepared.apply``), with no merge (a core's
worth of ~25 ms a reload on a 2-core machine) and no rows unpickled under its interpreter lock.
The child runs at nice 19, so on busy cores the server's and its clients' threads go first. A
child that dies is a failed reload (the served model untouched), and the next reload starts
another; ``stop`` (set on SIGTERM) ends the child and the reload under way.
"""

import os
import pickle
import select
import socket
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np

from cardinal.serve.follow import Follower, Prepared, Served, warm_apply
from cardinal.serve.model import ServingModel
from cardinal.serve.overlay import Overlaid, overlaid
from cardinal.serve.shared import recv, send, to_shared
from cardinal.serve.tables import SnapshotTable

POLL_S = 0.05  # how often a reload waiting on the child looks at ``stop``


class FollowerProcess:
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.stop = threading.Event()
        self._child = self._sock = None
        self._fresh = False  # a child that has not been sent the served tables yet

    def warm(self, current: ServingModel) -> None:
        """The child started and warm (``Follower.warm``'s reading half), and this process's half too."""
        self._ask("warm_prepare", current)
        warm_apply(current)

    def next_model(self, current: ServingModel) -> ServingModel | None:
        prepared = self._ask("prepare", current)
        return None if prepared is None else prepared.apply(current)

    def close(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            self._sock.close()
            self._child = self._sock = None

    def _ask(self, what: str, current: ServingModel):
        if self._child is None or self._child.poll() is not None:
            self.close()
            self._start()
        try:  # a fresh child is sent the served tables (shared, not copied, once in shared memory)
            send(self._sock, (what, Served.of(current), current.tables if self._fresh else None), share=True)
            self._fresh = False
            while not select.select([self._sock], [], [], POLL_S)[0]:
                if self.stop.is_set():
                    self.close()
                    return None
            ok, reply = recv(self._sock)
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
        self._sock, self._fresh = here, True


class Mirror:
    """The child's copy of the tables the server serves (the same shared pages), so that the child
    merges each delta and folds them in, and the server only takes the finished tables
    (``Prepared.merged``). It holds the served model's and the one last sent (the server may not
    have applied it); the server's ``Served`` says which it serves."""

    def __init__(self):
        self.held: list[tuple[Served, dict]] = []

    def sync(self, served: Served, tables: dict) -> None:
        self.held = [(served, tables)]

    @staticmethod
    def warm() -> None:
        """Merges of a delta into rows held here (read-only, shared) and of held rows into others,
        thrown away: the merge's kernels for read-only arrays loaded before the first reload."""
        delta = SnapshotTable.build(np.zeros(1, np.int64), np.zeros((1, 1), np.float32))
        held = _shared(delta)
        held.merged(delta, _NO_IDS)
        held.merged(held, _NO_IDS)

    def finish(self, served: Served, prepared: Prepared | None) -> Prepared | None:
        """``prepared`` merged over the tables ``served`` names; as it is (the server merges) when
        they are not held."""
        tables = next((t for s, t in self.held if s == served), None)
        if prepared is None or tables is None:
            return prepared
        if prepared.whole:
            new = {name: _shared(t) for name, t in prepared.tables.items()}
        else:
            new = {name: _shared(overlaid(tables[name], rows, deleted))
                   for name, (rows, deleted) in prepared.tables.items()}
        self.held = [(served, tables), (prepared.served(served), {**tables, **new})]
        sent = {name: (t.recent, t.gone, t.size) if isinstance(t, Overlaid) else t for name, t in new.items()}
        return replace(prepared, tables=sent, merged=True)


_NO_IDS = np.empty(0, np.int64)


def _shared(table: SnapshotTable | Overlaid) -> SnapshotTable | Overlaid:
    """``table`` with the arrays a merge made in shared memory (an overlay's base is held already)."""
    if isinstance(table, Overlaid):
        return Overlaid(table.base, _shared(table.recent), to_shared(table.gone), table.size)
    return SnapshotTable(table.form, table.width, to_shared(table.ids),
                         {k: to_shared(a) for k, a in table.arrays.items()})


def _serve(sock: socket.socket, run_dir: Path) -> None:
    """The child: a ``Follower`` answering the server's requests until the connection closes."""
    follower, mirror = None, Mirror()
    while True:
        try:
            what, served, tables = recv(sock)
        except EOFError:
            return
        try:
            follower = follower or Follower(run_dir)
            if tables is not None:
                mirror.sync(served, tables)
            if what == "warm_prepare":
                mirror.warm()
                follower.warm_prepare(served)
                reply = (True, None)
            else:
                reply = (True, mirror.finish(served, follower.prepare(served)))
        except Exception as e:  # the server logs it as a failed reload; this child goes on
            reply = (False, _sendable(e))
        send(sock, reply, share=True)


def _sendable(e: Exception) -> Exception:
    """``e`` if it survives a trip through pickle as itself, else a RuntimeError with its message."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    os.setpriority(os.PRIO_PROCESS, 0, 19)  # the lowest, whatever the server's
    _serve(socket.socket(fileno=int(sys.argv[1])), Path(sys.argv[2]))
