"""``ServerFailure``: a parameter server the job needs went away, froze or restarted.

Nothing the worker sent was wrong and nothing it can do alone will fix it, but it is not a
bug either: ``cardinal`` names the server on one line and exits 2, as for a bad recipe, on
every worker that meets it (the user restarts the server and resumes the run). The gRPC
transport's errors derive from it (``ps/transport/grpc_transport.py``); it lives here, with no
imports, so that ``cli.py`` catches it without loading the parameter-server code.

When one worker stops (its server died, say), the others meet it as torch.distributed's error
in their next collective (gloo: "connection closed by peer"): ``peer_failure`` names that too, on
one line, so every rank exits 2 rather than with a traceback. Where the peer stopped because a
server died, ``culprit_named`` asks the servers first, so every rank names the same server.
"""

import sys
from contextlib import contextmanager


class ServerFailure(RuntimeError):
    """A server stopped answering, answered with an internal error, or restarted; the message
    names its shard and address."""


RESUME_HINT = "a server of the job failed: start it again and resume the run (cardinal train --resume RUN_DIR)"


_PEER_GONE = ("Connection closed by peer", "Connection reset by peer")  # gloo's words for a peer gone


def peer_failure(e: BaseException) -> str | None:
    """One line for torch.distributed's error when another worker of the job went away, else None:
    a ``DistError``, or the plain RuntimeError gloo raises from a collective whose peer closed the
    connection. torch is looked at only where it is imported already (a worker's process)."""
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    if dist is None:
        return None
    text = str(e)
    gloo_peer_gone = isinstance(e, RuntimeError) and "gloo" in text and any(s in text for s in _PEER_GONE)
    if not gloo_peer_gone and not isinstance(e, getattr(dist, "DistError", ())):
        return None
    first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
    return (f"another worker of the job stopped (the workers' collective failed: {first[:160]}): see its log, then "
            "resume the run (cardinal train --resume RUN_DIR)")


@contextmanager
def culprit_named(probe):
    """A peer's failure met in a collective is first checked against the servers: ``probe`` asks
    each one and raises the ``ServerFailure`` naming a server that went away (the usual reason a
    peer stopped), so a rank that met only the collective names the same culprit as the rank that
    met the server; if every server answers, the peer's failure goes on as it was."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - re-raised unless a server is found gone
        if peer_failure(e) is not None:
            probe()
        raise
