"""``ServerFailure``: a parameter server the job needs went away, froze or restarted.

Nothing the worker sent was wrong and nothing it can do alone will fix it, but it is not a
bug either: ``cardinal`` names the server on one line and exits 2, as for a bad recipe, on
every worker that meets it (the user restarts the server and resumes the run). The gRPC
transport's errors derive from it (``ps/transport/grpc_transport.py``); it lives here, with no
imports, so that ``cli.py`` catches it without loading the parameter-server code.
"""


class ServerFailure(RuntimeError):
    """A server stopped answering, answered with an internal error, or restarted; the message
    names its shard and address."""


RESUME_HINT = "a server of the job failed: start it again and resume the run (cardinal train --resume RUN_DIR)"
