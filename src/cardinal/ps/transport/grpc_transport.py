"""Shard stores in server processes, reached over gRPC (``cardinal server``).

The same eight calls as the in-process transport, each a future: requests to different
shards go out in parallel, and ``wait`` has a deadline. Errors name the shard and address:

    ShardRequestError (a ValueError)  the server refused the request (INVALID_ARGUMENT, ...)
    ShardUnreachable (a TransientError) no connection: the client may send the request again
    ShardUnavailable                  it did not answer in time, or answered with an internal error
    ShardTimeout (a TimeoutError)     no reply within the wait's deadline
    ServerRestarted                   its incarnation changed since this client first saw it:
                                      its rows are gone or older, so training must not go on
All but the first are ``ServerFailure``s (``cardinal/failures.py``), and so is the first once the
client gives up resending: ``cardinal`` names the server on one line and exits 2.
Requests carry ids (``PSClient`` resends on a TransientError; the server applies each id
once). A call refused for the server's concurrency limit never ran, and is sent again after
a backoff; a client keeps at most ``max_in_flight`` calls in flight to each server, so that its
own fan-out (a request per table to every server, for many tables at once) waits for a free
call instead of being refused and backing off. Requests are split into messages of at most
``chunk_mb``, sent together. Pulls and pushes take a ``codec`` (``cardinal.codecs``): rows
and gradients cross encoded by it. A pull's rows come through shared memory from a server on
this host that offers it (``shared_rows.py``; ``shared_memory=False``: never).
"""

import itertools
import json
import threading
import time
import uuid
from pathlib import Path

import grpc
import numpy as np

from cardinal import codecs
from cardinal.checkpoint.parts import Part
from cardinal.failures import ServerFailure
from cardinal.ps.transport import held_calls, shared_rows, wire
from cardinal.ps.transport.base import DEFAULT_TIMEOUT, Handle, TransientError, Transport
from cardinal.ps.transport.requests import PullRequest, PushRequest
from cardinal.ps.validate import quote

BUSY_RETRIES, BUSY_BACKOFF_S = 8, 0.05
PART_HEADER = 8192  # bytes a part's header and arrays' names may take beside them, in a reply and a feed
REFUSED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED,
           grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED)


class ShardRequestError(ValueError):
    pass


class ShardUnavailable(ServerFailure):
    pass


class ShardUnreachable(TransientError, ServerFailure):
    """No answer (connection refused, reset), or the first attempt of a duplicate failed."""


class ShardTimeout(TimeoutError, ServerFailure):
    pass


class ServerRestarted(ServerFailure):
    pass


class _Call(Handle):
    """One request to one shard; ``wait`` decodes the reply and checks the incarnation."""

    def __init__(self, transport: "GrpcTransport", shard: int, method: str, message: bytes):
        self.t, self.shard, self.method, self.message = transport, shard, method, message
        self.busy = 0
        self.future = self._send()

    def _send(self):
        slots = self.t._slots[self.shard]
        if not slots.acquire(timeout=self.t.timeout):  # given back when the call ends, however it ends
            raise ShardUnavailable(f"shard {self.shard} at {self.t.addresses[self.shard]}: no call to it finished "
                                   f"within {self.t.timeout} s, and {self.t.max_in_flight} are in flight")
        self.t._holds.keep(self.shard)  # gRPC's thread for this channel kept, not started per call
        try:
            future = self.t._stubs[self.shard][self.method].future(self.message, timeout=self.t.timeout,
                                                                   metadata=self.t._metadata)
        except BaseException:
            slots.release()
            raise
        future.add_done_callback(lambda _: slots.release())
        return future

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT):
        where = f"shard {self.shard} at {self.t.addresses[self.shard]}"
        while True:
            try:
                reply = self.future.result(timeout)
                break
            except grpc.FutureTimeoutError:
                raise ShardTimeout(f"{where}: no answer to {self.method} within {timeout} s") from None
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "Concurrent RPC limit" in details \
                        and self.busy < BUSY_RETRIES:  # refused before it ran: safe to send again, a little later
                    time.sleep(BUSY_BACKOFF_S * 2 ** self.busy)
                    self.busy += 1
                    self.future = self._send()
                    continue
                if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED):
                    raise ShardUnreachable(f"{where}: {self.method} failed: {code.name}: {details}") from None
                if code in REFUSED:
                    raise ShardRequestError(f"{where} refused {self.method}: {code.name}: {details}") from None
                raise ShardUnavailable(f"{where}: {self.method} failed: {code.name}: {details}") from None
        self.t._count(received=len(reply))
        header, payload = wire.decode(reply)
        self.t._check_incarnation(self.shard, header["incarnation"])
        if "limits" in header:  # a Stats reply: what the server reads at once
            self.t._follow(self.shard, header["limits"])
        return header, payload


class _Mapped(Handle):
    def __init__(self, parts: list[Handle], combine):
        self.parts, self.combine = parts, combine

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT):
        return self.combine([p.wait(timeout) for p in self.parts])


def _save_reply(replies) -> dict:
    """The save's reply: rows per table, and its manifest's bytes (the payload) unless it was dry."""
    (header, payload), = replies
    reply = {k: v for k, v in header.items() if k != "incarnation"}
    return {**reply, "manifest": bytes(payload)} if not header.get("dry") else reply


def _push_reply(replies) -> dict:
    """The newest clock any part's reply saw (clocks only move forward), or {}; and the update
    log, from the one part that asked for it."""
    clocks = [h["clock"] for h, _ in replies if isinstance(h.get("clock"), int)]
    out = {"clock": max(clocks)} if clocks else {}
    for h, payload in replies:
        if isinstance(h.get("log"), dict):
            out["log"] = _update_log(h["log"], payload)
    return out


def _update_log(head: dict, payload) -> dict:
    """The update log of a push reply: per update (seq, step, number of ids), the ids, and (when
    not all 1) each id's count (int32); expanded to one (id, step, seq, count) per id, as the
    store answers in process."""
    n, k, counted = head.get("n"), head.get("updates"), head.get("counted")
    size = 8 * (3 * k + n) + 4 * n * bool(counted) if isinstance(n, int) and isinstance(k, int) else -1
    if not all(isinstance(x, int) and x >= 0 for x in (n, k)) or len(payload) != size:
        raise ShardUnavailable(f"a push reply's update log ({k!r} updates, {n!r} ids) does not match its "
                               f"{len(payload)} bytes")
    arrays = np.frombuffer(payload[:8 * (3 * k + n)], np.int64)
    seqs, steps, sizes, ids = arrays[:k], arrays[k:2 * k], arrays[2 * k:3 * k], arrays[3 * k:]
    if int(sizes.sum()) != n:
        raise ShardUnavailable(f"a push reply's update log counts {int(sizes.sum())} ids and carries {n}")
    counts = np.frombuffer(payload[8 * (3 * k + n):], "<i4").astype(np.int64) if counted else np.ones(n, np.int64)
    return {"cursor": head["cursor"], "reset": head["reset"], "clock": head["clock"], "ids": ids.copy(),
            "steps": np.repeat(steps, sizes), "seqs": np.repeat(seqs, sizes), "counts": counts}


class GrpcTransport(Transport):
    def __init__(self, addresses: list[str], job: str, token: str, *, timeout: float = DEFAULT_TIMEOUT,
                 tls_ca: str | None = None, max_message_mb: int = 64, chunk_mb: float = 4.0,
                 max_in_flight: int = 16, share: int = 1, shared_memory: bool = True):
        if not addresses:
            raise ValueError("a gRPC transport needs at least one server address")
        self.addresses, self.n_shards, self.timeout = list(addresses), len(addresses), timeout
        self.limit = max_message_mb << 20
        self.chunk_bytes = int(chunk_mb * (1 << 20))
        options = [("grpc.max_receive_message_length", self.limit), ("grpc.max_send_message_length", self.limit)]
        creds = grpc.ssl_channel_credentials(Path(tls_ca).read_bytes()) if tls_ca else None
        self._channels = [grpc.secure_channel(a, creds, options) if creds else grpc.insecure_channel(a, options)
                          for a in self.addresses]
        self._stubs = [{m: ch.unary_unary(f"/{wire.SERVICE}/{m}") for m in wire.SCHEMAS}
                       for ch in self._channels]
        self._metadata = (("x-cardinal-job", job), ("x-cardinal-token", token))
        self._holds = held_calls.Holds(self._channels, wire.SERVICE, self._metadata)
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.share = max(1, share)  # clients that share each server's calls (a job's workers)
        self._slots = [threading.BoundedSemaphore(max_in_flight) for _ in self.addresses]
        self._message = [self.chunk_bytes] * self.n_shards  # each server's largest request and calls read at
        self._calls = [max_in_flight] * self.n_shards        # once, as it said (Stats)
        self._largest = [self.limit] * self.n_shards  # each server's message limit, as it said
        self._told: set[int] = set()  # servers whose limits a Stats reply gave
        self.shared_memory = shared_memory and shared_rows.available()
        self._shares = [False] * self.n_shards  # servers that write a pull's rows into its regions, as they said
        self._regions = shared_rows.Regions(self.n_shards, max_in_flight)
        self._copies: set[str] = set()  # stored tables of copies of hot rows: their rows come in the reply
        self._incarnations: list[str | None] = [None] * self.n_shards
        self._client = uuid.uuid4().hex[:12]
        self._seq = itertools.count()
        self._dims: dict[str, int] = {}
        self.bytes_sent = self.bytes_received = 0  # message bytes, for traffic figures
        self._counting = threading.Lock()  # calls are sent and waited on from several threads
        # no heap.keep_freed_buffers() here: a client lives in its user's process (heap.py)

    def _count(self, sent: int = 0, received: int = 0) -> None:
        with self._counting:
            self.bytes_sent += sent
            self.bytes_received += received

    def _check_incarnation(self, shard: int, incarnation: str) -> None:
        known = self._incarnations[shard]
        if known is None:
            self._incarnations[shard] = incarnation
        elif known != incarnation:
            raise ServerRestarted(f"shard {shard} at {self.addresses[shard]} restarted (incarnation {known[:8]} -> "
                                  f"{incarnation[:8]}): its rows are gone or older; restart from the last checkpoint")

    def _call(self, shard, method, header, *arrays) -> _Call:
        header = {"v": wire.PROTOCOL, "shard": shard, "n_shards": self.n_shards, **header}
        message = wire.encode(header, *arrays)
        self._count(sent=len(message))
        return _Call(self, shard, method, message)

    def _dim(self, shard: int, table: str) -> int:
        if table not in self._dims:
            stats = self.stats(shard).wait()
            tables = stats["tables"]
            self._dims.update({name: t["dim"] for name, t in tables.items()})
            self._dims.update({name: t["dim"] for name, t in stats.get("replicas", {}).items()})  # copies of hot rows
            self._copies.update(stats.get("replicas", {}))
        if table not in self._dims:
            raise ShardRequestError(f"unknown table {table!r}; the servers have {sorted(self._dims)}")
        return self._dims[table]

    def _follow(self, shard: int, limits: dict) -> None:
        """Calls to ``shard`` sized as its server reads them: a server under a memory budget reads
        fewer and smaller calls at once (ps/server/process_memory.py), and a client that sent more would
        be refused and wait (each of ``share`` clients takes its part of the server's calls); its
        calls in flight give their slots back to the semaphore they took."""
        self._message[shard] = min(self.chunk_bytes, int(limits["message_bytes"]))
        self._largest[shard] = min(self.limit, int(limits["message_bytes"]))
        if shard not in self._told:  # once: a server found on another host stays there
            self._shares[shard] = self.shared_memory and limits.get("shared_rows") is True \
                and limits.get("region_offsets") is True  # servers before: one region a part
        self._told.add(shard)
        calls = min(self.max_in_flight, max(1, int(limits["calls"]) // self.share))  # this client's share
        if calls != self._calls[shard]:
            self._calls[shard], self._slots[shard] = calls, threading.BoundedSemaphore(calls)

    def _chunks(self, n: int, bytes_per_id: int, shard: int, largest: bool = False) -> list[slice]:
        """Requests of at most ``chunk_mb``, the message limit and the server's, sent together, as
        few as fit and of equal size: the server answers the first while it reads the rows of the
        next (one at a time: the table's lock), and a short first part starts that overlap sooner.
        ``largest``: of the largest message either side takes, not ``chunk_mb`` (a pull whose rows
        go to a region: every call's fixed cost is paid once, and a reply with the rows still fits)."""
        per = max(1, int(min(self.limit * 0.9, (self._largest if largest else self._message)[shard]) - 4096)
                  // bytes_per_id)
        k = max(1, -(-n // per))
        return [slice(n * i // k, n * (i + 1) // k) for i in range(k)]

    # --- the eight calls ---------------------------------------------------------------------

    def pull(self, shard: int, request: PullRequest) -> Handle:
        r, rows_codec = request, codecs.get(request.codec)
        dim = self._dim(shard, r.table)
        if self.shared_memory and shard not in self._told:  # whether it offers regions: its Stats say
            try:
                self.health(shard).wait(self.timeout)
            except (ServerFailure, ShardRequestError):  # the pull itself says what is wrong, when waited on
                pass
        rid = r.request_id or f"{self._client}-{next(self._seq)}"
        named = {} if rows_codec.name == "fp32" else {"codec": rows_codec.name}  # fp32: as servers before codecs read
        shared = self._shares[shard] and r.table not in self._copies  # copies of hot rows come in the reply
        row_bytes = rows_codec.row_bytes(dim)
        region = self._regions.take(shard, len(r.ids) * row_bytes) if shared else None  # one for all its parts
        chunks = self._chunks(len(r.ids), 8 + row_bytes, shard, largest=region is not None)
        at = {} if region is None else {"shm": region.name}
        parts = [self._call(shard, "Pull", {"table": r.table, "ids_bytes": 8 * (c.stop - c.start), "ids_dtype": "int64",
                                            "create": r.create, **named, **at,
                                            **({"shm_at": c.start * row_bytes} if region and c.start else {}),
                                            "step": int(r.step), "request_id": f"{rid}.{k}"}, r.ids[c])
                 for k, c in enumerate(chunks)]
        read = []  # the rows, read once: a region is reused once read

        def combine(replies):
            if not read:
                read.append(self._rows(shard, replies, chunks, region, rows_codec, len(r.ids), dim))
            return read[0]
        return _Mapped(parts, combine)

    def _rows(self, shard, replies, chunks, region, rows_codec, n, dim) -> np.ndarray:
        """A pull's rows from its parts' replies, or its region (``shared_rows.py``): fp32 rows
        where the server wrote them, the region lent to the caller; others decoded into one
        (n, dim) array, the region then free for other pulls."""
        row_bytes = rows_codec.row_bytes(dim)
        in_region = region is not None and all(h.get("shm") is True for h, _ in replies)
        lent = in_region and rows_codec.name == "fp32"
        out = None if lent else np.empty((n, dim), np.float32)
        try:
            rows = [wire.rows_from_reply(h, self._payload(h, p, region, c.start * row_bytes, (c.stop - c.start) * row_bytes),
                                         c.stop - c.start, rows_codec, None if lent else out[c])
                    for (h, p), c in zip(replies, chunks)]
        except wire.WireError as e:
            raise ShardUnavailable(f"shard {shard}: {e}") from None
        if in_region:
            region.shared()  # its server mapped it: its file may go
            if lent:  # checked: every part's rows are where the server wrote them
                return self._regions.lend(shard, region, n * row_bytes).view(np.float32).reshape(n, dim)
            self._regions.give(shard, region)
        elif region is not None:  # the server could not open it (another host): name no more to it
            self._shares[shard] = False
            self._regions.clear(shard)
        if all(x.shape == (c.stop - c.start, dim) for x, c in zip(rows, chunks)):
            return out
        return np.concatenate(rows)  # copies of hot rows past their bound answered none

    @staticmethod
    def _payload(header: dict, payload, region, at: int, size: int):
        """Where a pull reply's rows are: its payload, or ``size`` bytes from byte ``at`` of the
        region (checked against the header then, as a payload is)."""
        if "shm" not in header:
            return payload
        if header["shm"] is not True or region is None or len(payload):
            raise wire.WireError(f"shm: a reply of rows in shared memory ({quote(str(header['shm']))}, "
                                 f"{len(payload)} bytes beside) to a pull that named {'a' if region else 'no'} region")
        return region.view[at:at + size]

    def push(self, shard: int, request: PushRequest) -> Handle:
        r, grads_codec = request, codecs.get(request.codec)
        dim = r.grads.shape[1] if r.grads.ndim == 2 else 0
        rid = r.request_id or f"{self._client}-{next(self._seq)}"
        parts = []
        chunks = self._chunks(len(r.ids), 8 + grads_codec.row_bytes(max(dim, 1)) + (0 if r.counts is None else 4),
                              shard)
        for k, c in enumerate(chunks):
            g = np.ascontiguousarray(r.grads[c], np.float32)
            if grads_codec.name != "fp32":  # fp32 sends any array as it is: the server judges its shape
                g = grads_codec.encode(g)
            header = {"table": r.table, "ids_bytes": 8 * (c.stop - c.start), "ids_dtype": "int64",
                      "grads_bytes": g.nbytes, "dim": dim,
                      "dtype": "float32", "codec": wire.push_codec_name(grads_codec), "step": int(r.step),
                      "kind": r.kind, "request_id": f"{rid}.{k}"}
            if r.origin is not None:  # each message is one part of the worker's push of this step
                header.update(vars(r.origin.split(k, len(chunks))))
            extra = wire.with_counts(header, None if r.counts is None else r.counts[c])  # counts: after the grads
            parts.append(self._call(shard, "Push", header, r.ids[c], g, *extra))
        return _Mapped(parts, _push_reply)

    def save(self, shard, root, step, base=None, *, keep=None, dry=False):
        header = {"root": str(root), "step": int(step), **({} if base is None else {"base": int(base)})}
        header.update({"dry": True} if dry else {})
        steps = [] if keep is None else [np.asarray(sorted(keep), np.int64)]
        header.update({} if keep is None else {"keep": len(steps[0])})
        return _Mapped([self._call(shard, "Save", header, *steps)], _save_reply)

    def load(self, shard, step_path, phase="load", token=None, *, markers=None, part=None):
        header, sent = {"path": str(step_path), "phase": phase, "token": token}, []
        if markers is not None:  # the payload: not bounded by the header's size
            sent = [json.dumps(markers, separators=(",", ":")).encode()]
            header["commits"] = len(sent[0])
        if part is not None:  # a feed: the arrays a holder sent, on to this shard
            header["arrays"], sent = wire.encode_arrays(part.arrays)
            header.update(end=part.end, total=part.total)
        return _Mapped([self._call(shard, "Load", header, *sent)],
                       lambda r: {k: v for k, v in r[0][0].items() if k != "incarnation"})

    def read_part(self, shard, step_path, commit, need, to):
        for s in {shard, to}:  # the part must fit a message to either: sized as they read (Stats)
            if s not in self._told:
                self.health(s).wait(self.timeout)
        body = json.dumps(commit, separators=(",", ":")).encode()
        header = {"path": str(step_path), "commit": len(body), **need, "to": int(to),
                  "max_bytes": min(self._message[shard], self._message[to]) - PART_HEADER}

        def part(replies):
            (reply, payload), = replies
            try:
                return Part(reply["end"], reply["total"], wire.decode_arrays(reply.get("arrays"), payload))
            except (KeyError, wire.WireError) as e:
                raise ShardUnavailable(f"shard {shard}: a part's reply: {e}") from None
        return _Mapped([self._call(shard, "ReadPart", header, body)], part)

    def where(self, shard):
        return self.addresses[shard]

    def stats(self, shard, digest=False, check=False):
        return _Mapped([self._call(shard, "Stats", {"digest": digest, "check": check})], lambda r: r[0][0]["stats"])

    def health(self, shard):
        return _Mapped([self._call(shard, "Stats", {})], lambda r: r[0][0]["health"])

    def finish(self, shard, step):
        return _Mapped([self._call(shard, "Finish", {"step": int(step)})], lambda r: r[0][0]["finished"])

    def close(self):
        self._holds.close()
        for ch in self._channels:
            ch.close()
        self._regions.clear()
