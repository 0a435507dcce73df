"""What keeps an HTTP endpoint answering when its clients are slow, many or hostile.

`cardinal serve` and the metrics endpoints (servers', workers') answer clients they do not choose.
Without limits, a client that sends half a request holds its connection forever, a few thousand
such hold every file descriptor, and each malformed request writes a traceback to the log. So:

    HttpLimits(header_timeout_s=10, body_timeout_s=30, max_connections=512)
    cap = ConnectionCap(512)   # admit(conn) at connect; busy(conn) / idle(conn) around each request
    rate_limit_logs()          # warnings and errors: a burst of 10 of each kind, then 1 a minute, counted

A connection is idle while it waits for a request head (just opened, or kept alive after an
answer) and busy while a request is read and answered. Past the cap, a new connection closes the
longest-idle one (a silent or slow one: a real client's head arrives at once, and then it is busy);
when every connection is busy the new one is refused at once. Each read has its deadline, so a
busy connection ends within ``header_timeout_s + body_timeout_s`` and the time of its answer.
"""

import collections
import logging
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class HttpLimits:
    header_timeout_s: float = 10.0  # a connection's request head (line and headers) must arrive within this of its
                                    # opening, or of its previous answer: a kept-alive connection idle this long closes
    body_timeout_s: float = 30.0    # a request's body must arrive within this of its head (408, and the connection
                                    # closes)
    max_connections: int = 512      # connections open at once; past it a new one closes the longest-idle one, or,
                                    # all of them busy with a request, is refused at once (503)

    def __post_init__(self):
        for name in ("header_timeout_s", "body_timeout_s"):
            if not 0 < getattr(self, name) <= 3600:
                raise ValueError(f"{name} must be in (0, 3600] seconds, got {getattr(self, name)!r}")
        if not 1 <= self.max_connections <= 1 << 20:
            raise ValueError(f"max_connections must be in [1, {1 << 20}], got {self.max_connections!r}")


class ConnectionCap:
    """At most ``limit`` connections (anything with ``abort()``); used from one thread (an event loop)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._idle: collections.OrderedDict = collections.OrderedDict()  # longest idle first
        self._busy: set = set()

    def __len__(self) -> int:
        return len(self._idle) + len(self._busy)

    def admit(self, conn) -> bool:
        """Count a new connection in, closing the longest-idle one past the cap; False: all busy, refuse it."""
        if len(self) >= self.limit:
            if not self._idle:
                return False
            oldest, _ = self._idle.popitem(last=False)
            oldest.abort()
        self._idle[conn] = None
        return True

    def busy(self, conn) -> None:
        if self._idle.pop(conn, False) is None:
            self._busy.add(conn)

    def idle(self, conn) -> None:
        if conn in self._busy:
            self._busy.discard(conn)
            self._idle[conn] = None

    def forget(self, conn) -> None:
        self._idle.pop(conn, None)
        self._busy.discard(conn)


class RateLimit(logging.Filter):
    """Passes ``burst`` records of each kind (logger and message template), then one every ``every_s``
    seconds; the next one passed says how many were left out. Records below WARNING always pass."""

    def __init__(self, burst: int = 10, every_s: float = 60.0, kinds: int = 1000):
        super().__init__()
        self.burst, self.every_s, self.kinds = burst, every_s, kinds
        self._lock = threading.Lock()
        self._tokens: dict = {}  # kind -> [tokens, last refill, records left out]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        now, kind = time.monotonic(), (record.name, str(record.msg)[:200])
        with self._lock:
            if kind not in self._tokens and len(self._tokens) >= self.kinds:
                kind = ("", "")  # a flood of distinct templates shares one allowance
            tokens, last, dropped = self._tokens.setdefault(kind, [float(self.burst), now, 0])
            tokens = min(self.burst, tokens + (now - last) / self.every_s)
            passed = tokens >= 1
            self._tokens[kind] = [tokens - passed, now, 0 if passed else dropped + 1]
        if passed and dropped:
            record.msg = f"{record.msg} ({dropped} more like this left out of the log)"
        return passed


def rate_limit_logs(limit: RateLimit | None = None) -> RateLimit:
    """Rate-limit every record that reaches the root logger's handlers (the whole process's log)."""
    limit = limit or RateLimit()
    for handler in logging.getLogger().handlers:
        handler.addFilter(limit)
    return limit
