"""``ServerFailure``: a parameter server the job needs went away, froze or restarted.

Nothing the worker sent was wrong and nothing it can do alone will fix it, but it is not a
bug either: ``cardinal`` names the server on one line and exits 2, as for a bad recipe, on
every worker that meets it (the user restarts the server and resumes the run). The gRPC
transport's errors derive from it (``ps/transport/grpc_transport.py``); it lives here, with no
imports, so that ``cli.py`` catches it without loading the parameter-server code.

When one worker stops (its server died, say), the others meet it as torch.distributed's error
in their next collective (gloo: "connection closed by peer"): ``peer_failure`` names that too, on
one line, so every rank exits 2 rather than with a traceback.
"""

import sys


class ServerFailure(RuntimeError):
    """A server stopped answering, answered with an internal error, or restarted; the message
    names its shard and address."""


RESUME_HINT = "a server of the job failed: start it again and resume the run (cardinal train --resume RUN_DIR)"


def peer_failure(e: BaseException) -> str | None:
    """One line for torch.distributed's error when another worker of the job went away, else None.
    Told by its type, from torch only where it is imported already (a worker's process)."""
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    error = getattr(dist, "DistError", None)
    if error is None or not isinstance(e, error):
        return None
    first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
    return (f"another worker of the job stopped (the workers' collective failed: {first[:160]}): see its log, then "
            "resume the run (cardinal train --resume RUN_DIR)")
