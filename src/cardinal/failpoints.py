"""Named failpoints at each durable step, switched on from the environment (as etcd's).

    CARDINAL_FAILPOINTS="save.before_commit=exit,save.shard_file_written=raise@5"

Actions: ``exit`` ends the process at once (``os._exit``: no cleanup, no flushing, as a
crash), ``raise`` raises ``FailpointError``, ``sleep:SECONDS`` stalls. ``@N`` fires on the
N-th time this process reaches the point (and after), not before: a server can then die in
its second save, with a committed checkpoint behind it. The variable is read at every call,
so tests can switch failpoints on and off around one operation.
"""

import os
import threading
import time
from collections import Counter

ENV = "CARDINAL_FAILPOINTS"
EXIT_CODE = 86
_hits: Counter = Counter()
_lock = threading.Lock()


class FailpointError(RuntimeError):
    pass


def active() -> dict[str, str]:
    spec = os.environ.get(ENV, "").strip()
    points = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, action = item.partition("=")
        action, _, nth = action.partition("@")
        if not sep or not (action in ("exit", "raise") or action.startswith("sleep:")) or (nth and not nth.isdigit()):
            raise ValueError(f"{ENV}: {item!r} is not name=exit|raise|sleep:SECONDS[@N]")
        points[name] = (action, int(nth or 1))
    return points


def failpoint(name: str) -> None:
    point = active().get(name)
    if point is None:
        return
    action, nth = point
    with _lock:
        _hits[name] += 1
        if _hits[name] < nth:
            return
    if action == "exit":
        os._exit(EXIT_CODE)
    if action == "raise":
        raise FailpointError(f"failpoint {name}")
    time.sleep(float(action.split(":", 1)[1]))
