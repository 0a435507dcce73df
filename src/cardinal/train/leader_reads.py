"""What only worker 0 reads of the run directory, handed to every worker.

The run directory is worker 0's: on hosts with disks of their own (each pod its own volume) no
other worker's host holds it, and a directory of the same name there is absent, empty or stale.
So what a worker takes from it (a resume's recipe.json and its checks, the checkpoint's commit,
dense state and data position, best.json, whether a new run's directory holds checkpoints) is
read by worker 0 alone and sent to the others before anything is loaded: over the workers'
process group (``Workers.from_leader``), or, for the resumed recipe the group is made from, over
the group's rendezvous store (``before_group``), which the group then joins (``joined``). An
error worker 0 meets is raised on every worker as the same error, so none waits in a collective
for one that failed, and every worker prints the same line.
"""

import contextlib
import os
import pickle
from datetime import timedelta

JOIN_S = 300.0  # how long workers wait for each other at the rendezvous, and for worker 0's read
_joined: dict = {}  # the rendezvous store ``before_group`` made, for the process group to join


def handed(read, leader: bool, send, receive):
    """``read()`` on worker 0, its value (or its error, raised) on every worker. ``send`` and
    ``receive`` carry one ("value", v) or ("error", exception) from worker 0 to the others."""
    if not leader:
        kind, value = receive()
        if kind == "error":
            raise value
        return value
    try:
        value = read()
    except Exception as e:  # noqa: BLE001 - the same error, raised on every worker
        with contextlib.suppress(Exception):  # a worker gone already: worker 0's own error is the one to raise
            send(("error", _portable(e)))
        raise
    send(("value", value))
    return value


def _portable(e: Exception) -> Exception:
    """``e`` as it can cross to another process: itself when it pickles back, else a RuntimeError
    with its type and message."""
    try:
        return pickle.loads(pickle.dumps(e))
    except Exception:  # noqa: BLE001 - an exception whose __init__ pickle cannot call again
        return RuntimeError(f"worker 0: {type(e).__name__}: {e}")


def before_group(read):
    """``read()`` on worker 0 (RANK 0 of WORLD_SIZE), its value or error on every worker, before
    the workers' process group exists: through the store of its rendezvous (env://, as torchrun
    and ``cardinal launch`` set it), which ``Workers`` then makes the group on. Worker 0 goes on
    only once every worker has its answer: the store may be its own, and end with it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return read()
    import torch.distributed as dist  # not before: alone, a refused resume answers before torch loads

    rank = int(os.environ["RANK"])
    store = joined()
    if store is None:
        store, _, _ = next(dist.rendezvous("env://", rank, world, timeout=timedelta(seconds=JOIN_S)))
        _joined["store"] = store
    n = _joined["reads"] = _joined.get("reads", 0) + 1
    key = f"cardinal/leader-read/{n}"

    def send(message) -> None:
        store.set(key, pickle.dumps(message))
        store.wait([f"{key}/{r}" for r in range(1, world)])  # every worker has it

    def receive():
        message = pickle.loads(store.get(key))
        store.set(f"{key}/{rank}", b"1")
        return message

    return handed(read, rank == 0, send, receive)


def joined():
    """The rendezvous store ``before_group`` made in this process, or None."""
    return _joined.get("store")
