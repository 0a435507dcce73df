"""The gRPC servicer of one shard: decode, check, call the ``ShardStore``, encode.

Every method takes and returns raw bytes (``wire.py``); nothing here knows tables or
optimizers. Failures map to status codes that say what to change:

    INVALID_ARGUMENT     a malformed or impossible request (the message names the field)
    FAILED_PRECONDITION  a request for another shard, shard count or protocol version
    UNAUTHENTICATED      no job id or token;  PERMISSION_DENIED: another job, a wrong token
    RESOURCE_EXHAUSTED   (from gRPC itself) oversized messages, more calls than the limit

A push carries a request id (a pull may): the store applies each request once
(``request_log.py``), so a client may safely send again what it is unsure arrived.
"""

import hmac
import logging
from pathlib import Path

import grpc

from cardinal.ps.request_log import FirstAttemptFailed
from cardinal.ps.store import ShardStore
from cardinal.ps.transport import wire

SERVICE = "cardinal.Shard"
log = logging.getLogger(__name__)


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class ShardServicer:
    def __init__(self, store: ShardStore, data_dir: str | Path, job: str, token: str):
        self.store, self.data_dir = store, Path(data_dir).resolve()
        self.job, self.token = job, token

    def handler(self) -> grpc.GenericRpcHandler:
        methods = {"Pull": self._pull, "Push": self._push, "Save": self._save, "Load": self._load, "Stats": self._stats}
        return grpc.method_handlers_generic_handler(
            SERVICE, {name: grpc.unary_unary_rpc_method_handler(self._wrap(fn)) for name, fn in methods.items()})

    def _wrap(self, fn):
        def call(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                self._authorize(dict(context.invocation_metadata()))
                header, payload = wire.decode(request)
                self._check_target(header)
                reply, arrays = fn(header, payload)
                return wire.encode({**reply, "incarnation": self.store.incarnation}, *arrays)
            except _Abort as e:
                context.abort(e.code, e.message)
            except ValueError as e:  # the store's and the wire's validation errors
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            except FirstAttemptFailed as e:
                context.abort(grpc.StatusCode.ABORTED, str(e))
            except Exception as e:  # a bug: keep serving, say so
                log.exception("shard %d: %s failed", self.store.shard, fn.__name__)
                context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")
        return call

    def _authorize(self, metadata: dict) -> None:
        job, token = metadata.get("x-cardinal-job"), metadata.get("x-cardinal-token")
        if job is None or token is None:
            raise _Abort(grpc.StatusCode.UNAUTHENTICATED, "requests must carry the job id and token")
        if not hmac.compare_digest(job, self.job):
            raise _Abort(grpc.StatusCode.PERMISSION_DENIED, f"this server belongs to job {self.job!r}, not {job!r}")
        if not hmac.compare_digest(token, self.token):
            raise _Abort(grpc.StatusCode.PERMISSION_DENIED, "wrong token for this job")

    def _check_target(self, header: dict) -> None:
        version = header.get("v")
        if version != wire.PROTOCOL:
            raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                         f"v: protocol version {version!r}, this server speaks {wire.PROTOCOL}")
        shard, n = header.get("shard"), header.get("n_shards")
        if (shard, n) != (self.store.shard, self.store.n_shards):
            raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                         f"shard: request for shard {shard} of {n}, this server holds {self.store.shard} of {self.store.n_shards}")

    # --- methods: (header, payload) -> (reply header, arrays) ------------------------------

    def _pull(self, header, payload):
        ids, _ = wire.split_payload(header, payload, with_grads=False)
        request_id = header.get("request_id")
        if request_id is not None:
            wire.field(header, "request_id", str)
        rows = self.store.pull(wire.field(header, "table", str), ids, create=wire.field(header, "create", bool, True),
                               step=wire.field(header, "step", int, 0), request_id=request_id)
        return {"dim": rows.shape[1]}, [rows]

    def _push(self, header, payload):
        ids, grads = wire.split_payload(header, payload, with_grads=True)
        self.store.push(wire.field(header, "table", str), ids, grads, step=wire.field(header, "step", int, 0),
                        kind=wire.field(header, "kind", str, "grad"),
                        request_id=wire.field(header, "request_id", str))
        return {}, []

    def _inside(self, relative: str) -> Path:
        path = (self.data_dir / relative).resolve()
        if path != self.data_dir and self.data_dir not in path.parents:
            raise ValueError(f"path: {relative!r} is outside this server's data directory")
        return path

    def _save(self, header, payload):
        root = self._inside(wire.field(header, "root", str))
        manifest = self.store.save(str(root), wire.field(header, "step", int))
        return {"rows": {t: m["rows"] for t, m in manifest["tables"].items()}}, []

    def _load(self, header, payload):
        token = header.get("token")
        if token is not None:
            wire.field(header, "token", str)
        return self.store.load(str(self._inside(wire.field(header, "path", str))),
                               wire.field(header, "phase", str, "load"), token), []

    def _stats(self, header, payload):
        try:
            stats = self.store.stats(digest=wire.field(header, "digest", bool, False),
                                     check=wire.field(header, "check", bool, False))
        except AssertionError as e:
            raise _Abort(grpc.StatusCode.DATA_LOSS, f"shard {self.store.shard} failed its check: {e}") from None
        return {"stats": stats, "health": self.store.health()}, []
