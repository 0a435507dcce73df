"""Exactly-once requests with bounded memory: per client, a window of recent sequence numbers.

A request can arrive twice: the network duplicated it, or the client sent it again after
losing the reply. Request ids name their client and a sequence number the client never
reuses (the gRPC transport adds a part number when it splits a request):

    "3f9a0c1b2d4e-17"      client 3f9a0c1b2d4e, request 17
    "3f9a0c1b2d4e-17.2"    part 2 of request 17

As TCP and ps-lite's resender do, the store keeps per client the last ``window`` keys
(seq, part) it saw and the floor below which it keeps nothing. A key in the window is
answered once: a pull seen before is answered without counting the sighting again, a push
seen before is acknowledged without being applied again, and one resent with another
payload (a digest of table, step, ids, gradients) is refused. A key below the floor is
refused as too old rather than risk applying it twice. While the first attempt still runs, a
duplicate waits for it; if the first attempt failed, the duplicate is told to send again.

Clients are bounded too (``max_clients``). A client silent for ``client_idle_s`` (longer than
any client keeps resending) is forgotten for good: nothing of it can come again. When a new
client finds the table full of younger ones, a flood of made-up names must not shut real
workers out, so room is made (``_make_room``): the least recently seen client with nothing in
flight is forgotten, one that has sent fewer than ``ESTABLISHED`` requests first (a made-up
name sends one or two, a worker thousands). Its name is kept as a tombstone until it too has
been silent for ``client_idle_s``: a request of a forgotten client may have been applied
already, so it is refused as too old, never applied twice. A new client is refused only while
even the tombstones are full of young ones (``TOMBSTONES`` x max_clients names: a flood of that
many names within ``client_idle_s``). Memory: max_clients x window entries, about 150 bytes each,
and the tombstones' names.
"""

import heapq
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from cardinal.ps.limits import StoreFull, StoreLimits
from cardinal.ps.validate import quote

MAX_REQUEST_ID = 96
_ID = re.compile(r"([A-Za-z0-9_]{1,64})-([0-9]{1,18})(?:\.([0-9]{1,4}))?")
_PARTS = 10_000
ESTABLISHED = 64  # requests after which a client is taken for a worker, forgotten last
TOMBSTONES = 8    # names of forgotten clients kept, per max_clients


class FirstAttemptFailed(RuntimeError):
    """A duplicate of a request whose first attempt failed: send it again."""


class RequestIdError(ValueError):
    """A malformed request id, one below the client's window, or one reused for another payload."""


def parse(request_id: str) -> tuple[str, int]:
    """(client, key): key orders (seq, part) within the client."""
    m = _ID.fullmatch(request_id) if isinstance(request_id, str) and len(request_id) <= MAX_REQUEST_ID else None
    if m is None:
        shown = quote(request_id) if isinstance(request_id, str) else type(request_id).__name__
        raise RequestIdError(f"request_id: {shown} is not CLIENT-SEQ[.PART] (CLIENT: 1-64 letters, digits or '_'; "
                             "SEQ: up to 18 digits; PART: up to 4 digits)")
    return m[1], int(m[2]) * _PARTS + int(m[3] or 0)


class _Entry:
    __slots__ = ("done", "fingerprint")

    def __init__(self, fingerprint: int):
        self.done: threading.Event | None = threading.Event()  # None once the first attempt succeeded
        self.fingerprint = fingerprint


class _Client:
    __slots__ = ("floor", "entries", "heap", "last_seen", "requests", "in_flight")

    def __init__(self, now: float):
        self.floor = 0                        # keys below are refused as too old
        self.entries: dict[int, _Entry] = {}
        self.heap: list[int] = []             # keys of entries, smallest first (may hold stale keys)
        self.last_seen = now
        self.requests = 0                     # first attempts seen
        self.in_flight = 0                    # first attempts still running


class RequestLog:
    def __init__(self, limits: StoreLimits | None = None, clock: Callable[[], float] = time.monotonic):
        self.limits = limits or StoreLimits()
        self.clock = clock
        self._clients: OrderedDict[str, _Client] = OrderedDict()  # least recently heard first
        self._forgotten: OrderedDict[str, float] = OrderedDict()  # tombstones: name -> when forgotten, oldest first
        self._lock = threading.Lock()

    def run(self, request_id: str | None, fingerprint: int, apply: Callable, replay: Callable):
        """``apply()`` the first time ``request_id`` is seen, ``replay()`` after that."""
        if request_id is None:
            return apply()
        name, key = parse(request_id)
        with self._lock:
            client = self._client(name)
            if key < client.floor:
                raise RequestIdError(f"request_id: {quote(request_id)} is older than this server remembers for its "
                                     f"client (the last {self.limits.request_window} requests): it may have been "
                                     "applied already, so it is refused; restart from the last checkpoint")
            entry = client.entries.get(key)
            first = entry is None
            if first:
                entry = client.entries[key] = _Entry(fingerprint)
                heapq.heappush(client.heap, key)
                client.requests += 1
                client.in_flight += 1
                self._trim(client)
            elif entry.fingerprint != fingerprint:
                raise RequestIdError(f"request_id: {quote(request_id)} was used before for another request; "
                                     "give every request its own id")
            done = entry.done
        if not first:
            if done is not None:
                done.wait()
                with self._lock:
                    if client.entries.get(key) is not entry:
                        raise FirstAttemptFailed(f"request {quote(request_id)}: the first attempt failed; send it again")
            return replay()
        try:
            result = apply()
        except BaseException:
            with self._lock:
                client.in_flight -= 1
                if client.entries.get(key) is entry:
                    del client.entries[key]  # not applied: a resend may apply it
            done.set()
            raise
        with self._lock:
            client.in_flight -= 1
            entry.done = None
        done.set()
        return result

    def _client(self, name: str) -> _Client:
        now = self.clock()
        client = self._clients.get(name)
        if client is not None:
            self._clients.move_to_end(name)
            client.last_seen = now
            return client
        self._age(now)
        if name in self._forgotten:
            raise RequestIdError(f"request_id: client {quote(name)} was forgotten to make room for newer clients "
                                 f"(ps.limits.max_clients = {self.limits.max_clients}): its requests may have been "
                                 "applied already, so they are refused; restart from the last checkpoint")
        self._make_room(now)
        client = self._clients[name] = _Client(now)
        return client

    def _age(self, now: float) -> None:
        """Forget for good the clients, and the tombstones, silent for ``client_idle_s``: past any
        resend, nothing of them can come again."""
        for names in (self._clients, self._forgotten):
            while names:
                oldest_name, oldest = next(iter(names.items()))
                if now - (oldest.last_seen if names is self._clients else oldest) < self.limits.client_idle_s:
                    break
                del names[oldest_name]

    def _make_room(self, now: float) -> None:
        """Room for one more client, or ``StoreFull`` (see the module's docstring)."""
        if len(self._clients) < self.limits.max_clients:
            return
        if len(self._forgotten) >= TOMBSTONES * self.limits.max_clients:
            raise StoreFull(f"this server has forgotten {len(self._forgotten)} clients within "
                            f"ps.limits.client_idle_s = {self.limits.client_idle_s} to make room for new ones "
                            f"(ps.limits.max_clients = {self.limits.max_clients}): a flood of client names; new "
                            "clients are refused until they age out")
        quiet = [(n, c) for n, c in self._clients.items() if c.in_flight == 0]  # least recently heard first
        if not quiet:
            raise StoreFull(f"each of the {self.limits.max_clients} clients this server remembers has a request in "
                            "flight; raise ps.limits.max_clients")
        name, _ = next(((n, c) for n, c in quiet if c.requests < ESTABLISHED), quiet[0])
        del self._clients[name]
        self._forgotten[name] = now

    def _trim(self, client: _Client) -> None:
        """Forget the oldest keys past the window; the floor rises above them."""
        while len(client.entries) > self.limits.request_window:
            key = heapq.heappop(client.heap)
            if client.entries.pop(key, None) is not None:
                client.floor = max(client.floor, key + 1)
        if len(client.heap) > 2 * self.limits.request_window + 16:  # keys of failed attempts
            client.heap = sorted(client.entries)

    def __len__(self) -> int:
        return sum(len(c.entries) for c in self._clients.values())
