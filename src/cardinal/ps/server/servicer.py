"""The gRPC servicer of one shard: decode, check, call the ``ShardStore``, encode.

Every method takes and returns raw bytes (``ps/transport/wire.py``); nothing here knows tables or
optimizers. Failures map to status codes that say what to change:

    INVALID_ARGUMENT     a malformed or impossible request (the message names the field)
    FAILED_PRECONDITION  a request for another shard, shard count or protocol version, or of a job
                         that finished (``Finish``)
    UNAUTHENTICATED      no job id or token;  PERMISSION_DENIED: another job, a wrong token
    RESOURCE_EXHAUSTED   oversized messages and more calls than the limit (from gRPC itself), a
                         pull whose reply would pass the message limit, a full store
                         (``StoreFull``): each refused before anything changes

A pull names the codec of the rows in its reply and a push the codec of its gradients
(``cardinal.codecs``; fp32 when unnamed): an unknown codec, or gradients whose size is not
len(ids) x that codec's row, is INVALID_ARGUMENT naming the field, before anything changes.

A pull may name a region of shared memory for its rows (``shm``, ``ps/transport/shared_rows.py``):
a server that can open it, on the client's host, writes them there (from byte ``shm_at``) and
replies ``"shm": true``.

``Hold`` carries nothing: a job's client holds it open so that gRPC Python keeps its thread for the
channel (``ps/transport/held_calls.py``); the server ends every hold when it stops.

A push carries a request id (a pull may): the store applies each request once
(``request_log.py``), so a client may safely send again what it is unsure arrived.

``Finish`` ends the job on this server (``process.py``): once the shard holds the job's final
checkpoint (``StoreCheckpoints.check_final``), the server answers it (again, to a resend of the
same step) and refuses every other request of the job, FAILED_PRECONDITION, while it stops.

Methods are registered as client-streaming (stream_unary) although clients call them as
unary: gRPC Python reads a unary request whole before any handler runs, so an
unauthenticated flood of large messages would be read into memory; here the job and token
are checked from the metadata first, and the message is read only for an authorized call.
Error messages quote at most a short prefix of what the sender chose, never this server's job
or token, and are cut to ``MAX_DETAILS`` (gRPC metadata is bounded).
"""

import hmac
import json
import logging
import threading
import time
from pathlib import Path

import grpc
import numpy as np

from cardinal.checkpoint.layout import own_root
from cardinal.checkpoint.parts import Need, Part
from cardinal.ps.limits import StoreFull
from cardinal.ps.server.request_log import FirstAttemptFailed
from cardinal.ps.server.store import ShardStore
from cardinal.ps.transport import heap, held_calls, shared_rows, wire
from cardinal.ps.transport.requests import Origin
from cardinal.ps.validate import quote

MAX_DETAILS = 1024
REPLY_HEADER = 4096  # bytes a reply header may take beside its rows
log = logging.getLogger(__name__)


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class ShardServicer:
    def __init__(self, store: ShardStore, data_dir: str | Path, job: str, token: str,
                 max_message_bytes: int = 16 << 20, metrics=None, max_calls: int = 16):
        self.metrics = metrics  # a ``ShardMetrics`` (ps/server/metrics.py) that counts every call, or None
        self.store, self.data_dir = store, Path(data_dir).resolve()
        self.job, self.token = job, token
        self.max_message_bytes, self.max_calls = max_message_bytes, max_calls  # told to clients in Stats
        self.finished: int | None = None  # the step of the job's final checkpoint, once Finish came
        self.ended = threading.Event()  # set by Finish: the server process stops
        self._finishing = threading.Lock()
        heap.keep_freed_buffers()  # replies are large and many: reuse their memory (heap.py)
        self.regions = shared_rows.Mapped()  # clients' regions a pull's rows may go to, on this host
        self.held = held_calls.Held()  # clients' calls held open (held_calls.py), ended when the server stops

    @property
    def shares_rows(self) -> bool:
        """Whether pulls' rows may go to clients' regions: not under a memory budget, which the
        pages mapped would count against."""
        return not self.store.limits.memory_budget

    def handler(self) -> grpc.GenericRpcHandler:
        methods = {"Pull": self._pull, "Push": self._push, "Save": self._save, "Load": self._load,
                   "ReadPart": self._read_part, "Stats": self._stats, "Finish": self._finish}
        handlers = {name: grpc.stream_unary_rpc_method_handler(self._wrap(name, fn)) for name, fn in methods.items()}
        handlers[held_calls.METHOD] = grpc.unary_stream_rpc_method_handler(self._hold)
        return grpc.method_handlers_generic_handler(wire.SERVICE, handlers)

    def _hold(self, request, context: grpc.ServicerContext, send_response_callback) -> None:
        """A job's client holds this call open until the server stops (``held_calls.py``)."""
        try:
            self._authorize(dict(context.invocation_metadata()))
        except _Abort as e:
            context.abort(e.code, e.message)
        self.held.add(send_response_callback, context)
    _hold.experimental_non_blocking = True  # gRPC: the handler returns, the call stays open without a thread

    def _wrap(self, method: str, fn):
        def call(requests, context: grpc.ServicerContext) -> bytes:
            if self.metrics is None:
                return answer(requests, context, {})
            start, seen = time.perf_counter(), {}
            code = "OK"
            try:
                return answer(requests, context, seen)
            except Exception:
                code = context.code().name if context.code() is not None else "UNKNOWN"
                raise
            finally:
                self.metrics.observe(method, seen.get("table", ""), code, time.perf_counter() - start, seen.get("rows", 0))

        def answer(requests, context: grpc.ServicerContext, seen: dict) -> bytes:
            try:
                self._authorize(dict(context.invocation_metadata()))
                if self.finished is not None and method != "Finish":
                    raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                                 f"job {self.job!r} finished with its checkpoint of step {self.finished}, and this "
                                 "server ends with it: start new servers for the next job")
                try:
                    request = next(requests, None)  # read only once the caller is known
                except grpc.RpcError:  # the caller went away (deadline, cancel) while sending: no one to answer
                    log.debug("shard %d: %s cancelled by its caller before it arrived", self.store.shard, method)
                    return b""
                if request is None:
                    raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, "message: none sent")
                header, payload = wire.decode(request)
                if isinstance(header.get("table"), str) and (header["table"] in self.store.tables
                                                             or header["table"] in self.store.replicas):
                    seen["table"] = header["table"]  # a metric label: only the names of tables that exist
                    ids_bytes = header.get("ids_bytes")
                    seen["rows"] = ids_bytes // 8 if isinstance(ids_bytes, int) and ids_bytes > 0 else 0
                self._check_target(header)
                wire.check_schema(method, header)
                reply = fn(header, payload)
                if isinstance(reply, bytes):  # the message itself, built in place (a pull's rows)
                    return reply
                return wire.encode(self._stamped(reply[0]), *reply[1])
            except _Abort as e:
                context.abort(e.code, _cut(e.message))
            except StoreFull as e:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, _cut(str(e)))
            except (ValueError, TypeError) as e:  # the store's and the wire's validation errors
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, _cut(str(e)))
            except FirstAttemptFailed as e:
                context.abort(grpc.StatusCode.ABORTED, _cut(str(e)))
            except Exception as e:  # a bug: keep serving, say so
                log.exception("shard %d: %s failed", self.store.shard, method)
                context.abort(grpc.StatusCode.INTERNAL, _cut(f"{type(e).__name__}: {e}"))
        return call

    def _authorize(self, metadata: dict) -> None:
        job, token = metadata.get("x-cardinal-job"), metadata.get("x-cardinal-token")
        if not isinstance(job, str) or not isinstance(token, str):
            raise _Abort(grpc.StatusCode.UNAUTHENTICATED, "requests must carry the job id and token")
        if not hmac.compare_digest(job.encode(), self.job.encode()):
            raise _Abort(grpc.StatusCode.PERMISSION_DENIED, "this server belongs to another job: check ps.job")
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            raise _Abort(grpc.StatusCode.PERMISSION_DENIED, "wrong token for this job")

    def _check_target(self, header: dict) -> None:
        version = header.get("v")
        if not wire._is(version, int) or version != wire.PROTOCOL:
            raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                         f"v: protocol version {_short(version)}, this server speaks {wire.PROTOCOL}")
        shard, n = header.get("shard"), header.get("n_shards")
        if not (wire._is(shard, int) and wire._is(n, int)) or (shard, n) != (self.store.shard, self.store.n_shards):
            raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                         f"shard: request for shard {_short(shard)} of {_short(n)}, this server holds "
                         f"{self.store.shard} of {self.store.n_shards}")

    def _stamped(self, reply: dict) -> dict:
        """A reply's header: every reply says which incarnation of the store answered."""
        return {**reply, "incarnation": self.store.incarnation}

    # --- methods: (header, payload) -> (reply header, arrays), or the reply's message ---------

    def _pull(self, header, payload):
        ids, _ = wire.split_payload(header, payload, with_grads=False)
        codec = wire.codec_of(header)  # the reply's rows: checked before anything is created
        request_id = header.get("request_id")
        if request_id is not None:
            wire.field(header, "request_id", str)
        name = wire.field(header, "table", str)
        table = self.store.tables.get(name)
        table = self.store.replicas.get(name) if table is None else table  # not `or`: a table of no rows is false
        reply_bytes = len(ids) * (codec.row_bytes(table.dim) if table is not None else 0) + REPLY_HEADER
        if reply_bytes > self.max_message_bytes:
            raise _Abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                         f"a pull of {len(ids)} ids of dim {table.dim} needs a {reply_bytes / 2**20:.1f} MiB reply, "
                         f"over this server's message limit of {self.max_message_bytes / 2**20:.1f} MiB "
                         "(ps.limits.max_message_mb, or less under ps.memory.budget): pull fewer ids per request (nothing was created)")
        pull = {"create": wire.field(header, "create", bool, True), "step": wire.field(header, "step", int, 0),
                "request_id": request_id}
        if name not in self.store.tables:  # copies of hot rows, which may answer none (or an unknown table)
            rows = self.store.pull(name, ids, **pull)
            stale = {"stale": True} if len(rows) != len(ids) else {}  # copies past their bound: none
            return {"dim": rows.shape[1], "dtype": "float32", "codec": codec.name, **stale}, [codec.encode(rows)]
        reply = self._stamped({"dim": table.dim, "dtype": "float32", "codec": codec.name})
        size = len(ids) * codec.row_bytes(table.dim)
        into = self.regions.get(header["shm"], size, wire.field(header, "shm_at", int, 0)) \
            if "shm" in header and self.shares_rows else None
        if into is not None:  # the client's region, on this host: the reply says so (shared_rows.py)
            message = wire.encode({**reply, "shm": True})
        else:
            message, into = wire.encode_blank(reply, size)
        if codec.name == "fp32":  # the table writes its rows straight into the reply, or the region
            self.store.pull(name, ids, **pull, out=into.view(np.float32).reshape(len(ids), table.dim))
        else:  # encoded into it
            codec.encode(self.store.pull(name, ids, **pull), out=into)
        return message

    def _push(self, header, payload):
        payload, counts = wire.take_counts(header, payload)  # a counted push's last part
        ids, grads = wire.split_payload(header, payload, with_grads=True)
        origin = None
        if any(k in header for k in wire.ORIGIN):  # typed by SCHEMAS; Origin checks their ranges
            for k in ("worker", "workers"):
                wire.field(header, k, int)  # a push with an origin names its worker and their number
            nulls = [k for k in wire.ORIGIN if k in header and header[k] is None]
            if nulls:
                raise ValueError(f"{nulls[0]}: expected {wire.ORIGIN[nulls[0]].__name__}, got null")
            origin = Origin(**{k: header[k] for k in wire.ORIGIN if k in header})
        reply = self.store.push(wire.field(header, "table", str), ids, grads, step=wire.field(header, "step", int, 0),
                                kind=wire.field(header, "kind", str, "grad"),
                                request_id=wire.field(header, "request_id", str), origin=origin, counts=counts)
        if "log" not in reply:
            return reply, []
        log = reply["log"]  # as payload: (seq, step, ids) per update, the ids, their steps' counts if not all 1
        seqs, first, sizes = np.unique(log["seqs"], return_index=True, return_counts=True)
        counted = bool((log["counts"] != 1).any())
        head = {"cursor": log["cursor"], "reset": log["reset"], "clock": log["clock"], "updates": len(seqs),
                "n": len(log["ids"]), "counted": counted}
        arrays = [np.ascontiguousarray(a, np.int64) for a in (seqs, log["steps"][first], sizes, log["ids"])]
        return {**reply, "log": head}, arrays + ([np.ascontiguousarray(log["counts"], "<i4")] if counted else [])

    def _place(self, named: str, step: bool = False) -> Path:
        """Where a checkpoint directory the workers name lies on this server: as named when that is
        inside its data directory (a directory shared with the workers, or the same path on this
        host's own disk), else under this server's own root for the job (``layout.own_root``): no
        path is assumed equal across hosts. ``step``: ``named`` is a step directory (kept by name)."""
        if len(named) > 4096 or "\0" in named:
            raise ValueError(f"path: {quote(named)} is not a usable path")
        path = (self.data_dir / named).resolve()
        if path == self.data_dir or self.data_dir in path.parents:
            return path
        own = own_root(self.data_dir, self.job)
        return own / path.name if step else own

    def _save(self, header, payload):
        root = self._place(wire.field(header, "root", str))
        base = wire.field(header, "base", int) if "base" in header else None
        keep = None
        if "keep" in header:  # the steps the workers keep, as int64s
            n = wire.field(header, "keep", int)
            if n < 0 or len(payload) != 8 * n:
                raise wire.WireError(f"keep: {_short(n)} steps, the payload holds {len(payload)} bytes")
            keep = np.frombuffer(payload, np.int64).tolist()
        dry = wire.field(header, "dry", bool, False)
        reply = self.store.save(str(root), wire.field(header, "step", int), base, keep=keep, dry=dry)
        where = {"where": str(root), **({"dry": True} if dry else {})}
        return {"rows": reply["rows"], **where}, [reply["manifest"]] if not dry else []

    def _load(self, header, payload):
        markers = _json(header, payload, "commits") if "commits" in header else None  # the chain's commits
        part = None
        if "arrays" in header:  # a feed: the part a holder sent (checkpoint/parts.py)
            if markers is not None:
                raise wire.WireError("arrays: a load sends commits or a part's arrays, not both")
            part = Part(wire.field(header, "end", int), wire.field(header, "total", int),
                        wire.decode_arrays(header["arrays"], payload))
        reply = self.store.load(str(self._place(wire.field(header, "path", str), step=True)),
                                wire.field(header, "phase", str, "load"), header.get("token"),  # typed by SCHEMAS
                                markers=markers, part=part)
        return reply, []

    def _read_part(self, header, payload):
        need = {k: header.get(k) for k in Need._fields}
        max_bytes = wire.field(header, "max_bytes", int, self.max_message_bytes - REPLY_HEADER)
        part = self.store.read_part(str(self._place(wire.field(header, "path", str), step=True)),
                                    _json(header, payload, "commit"), need, wire.field(header, "to", int),
                                    max(1, min(max_bytes, self.max_message_bytes - REPLY_HEADER)))
        spec, arrays = wire.encode_arrays(part.arrays)
        return {"end": part.end, "total": part.total, "arrays": spec}, arrays

    def _stats(self, header, payload):
        try:
            stats = self.store.stats(digest=wire.field(header, "digest", bool, False),
                                     check=wire.field(header, "check", bool, False))
        except AssertionError as e:
            raise _Abort(grpc.StatusCode.DATA_LOSS, f"shard {self.store.shard} failed its check: {e}") from None
        limits = {"message_bytes": self.max_message_bytes, "calls": self.max_calls,  # clients size their calls by it
                  "shared_rows": self.shares_rows, "region_offsets": self.shares_rows}
        return {"stats": stats, "health": self.store.health(), "limits": limits}, []

    def _finish(self, header, payload):
        step = wire.field(header, "step", int)
        with self._finishing:
            if self.finished is None:
                self.store.check_final(step)
                self.finished = step
            elif step != self.finished:
                raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                             f"step: the job finished with its checkpoint of step {self.finished}, not {step}")
        log.info("shard %d: job %s finished with its checkpoint of step %d; stopping", self.store.shard, self.job, step)
        self.ended.set()
        return {"finished": step}, []



def _json(header: dict, payload, name: str):
    """The JSON a request's payload holds whole, its length the header's ``name``."""
    n = wire.field(header, name, int)
    if n != len(payload):
        raise wire.WireError(f"{name}: {_short(n)} bytes, the payload holds {len(payload)}")
    try:
        return json.loads(bytes(payload))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise wire.WireError(f"{name}: not JSON ({str(e)[:80]})") from None


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DETAILS else text[:MAX_DETAILS - 20] + "... (cut)"


def _short(value) -> str:
    """A header value the sender chose, for an error message: short, and typed."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"of type {type(value).__name__}"
    return str(value) if abs(value) < 10**20 else "a huge number"
