"""Named failpoints at each durable step, switched on from the environment (as etcd's).

    CARDINAL_FAILPOINTS="save.before_commit=exit,save.shard_file_written=raise"

Actions: ``exit`` ends the process at once (``os._exit``: no cleanup, no flushing, as a
crash), ``raise`` raises ``FailpointError``, ``sleep:SECONDS`` stalls. The variable is read at
every call, so tests can switch failpoints on and off around one operation.
"""

import os
import time

ENV = "CARDINAL_FAILPOINTS"
EXIT_CODE = 86


class FailpointError(RuntimeError):
    pass


def active() -> dict[str, str]:
    spec = os.environ.get(ENV, "").strip()
    points = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, action = item.partition("=")
        if not sep or not (action in ("exit", "raise") or action.startswith("sleep:")):
            raise ValueError(f"{ENV}: {item!r} is not name=exit|raise|sleep:SECONDS")
        points[name] = action
    return points


def failpoint(name: str) -> None:
    action = active().get(name)
    if action is None:
        return
    if action == "exit":
        os._exit(EXIT_CODE)
    if action == "raise":
        raise FailpointError(f"failpoint {name}")
    time.sleep(float(action.split(":", 1)[1]))
