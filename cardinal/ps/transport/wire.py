"""The wire format of the gRPC transport: a small JSON header, then raw array bytes.

    [ uint32 LE: header length | header (JSON, utf-8) | payload bytes ]

A pull's payload is the ids (int64, little-endian); a push's is the ids then the gradients
(float32, row-major); a pull's reply is the rows. The header says how many bytes each part
has, so a malformed message is caught before anything is read from it:

    {"v": 1, "shard": 0, "n_shards": 2, "table": "emb", "ids_bytes": 8192, "grads_bytes": 65536,
     "dtype": "float32", "codec": "raw", "step": 12, "create": true, "request_id": "c1f0-17"}

Arrays cross without per-element encoding (``np.frombuffer`` on arrival, no copy).
"""

import json
import struct

import numpy as np

PROTOCOL = 1
CODECS = ("raw",)
DTYPES = {"float32": np.float32}
_LEN = struct.Struct("<I")
MAX_HEADER = 1 << 16


class WireError(ValueError):
    """A message that cannot be decoded; the text names the field at fault."""


def encode(header: dict, *payload: np.ndarray | bytes) -> bytes:
    """One message; arrays are copied once, straight into it."""
    head = json.dumps(header, separators=(",", ":")).encode()
    parts = [p if isinstance(p, bytes) else memoryview(np.ascontiguousarray(p)).cast("B") for p in payload]
    return b"".join([_LEN.pack(len(head)), head, *parts])


def decode(message: bytes) -> tuple[dict, memoryview]:
    if len(message) < _LEN.size:
        raise WireError("message: too short for a header length")
    (n,) = _LEN.unpack_from(message)
    if n > MAX_HEADER or _LEN.size + n > len(message):
        raise WireError(f"header: length {n} does not fit the message ({len(message)} bytes)")
    try:
        header = json.loads(bytes(message[_LEN.size:_LEN.size + n]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"header: not JSON ({e})") from None
    if not isinstance(header, dict):
        raise WireError("header: must be a JSON object")
    return header, memoryview(message)[_LEN.size + n:]


def field(header: dict, name: str, kind: type, default=None):
    """A header field of the given type; missing or mistyped fields are named."""
    value = header.get(name, default)
    if value is None or not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise WireError(f"{name}: expected {kind.__name__}, got {value!r}")
    return value


def split_payload(header: dict, payload: memoryview, with_grads: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(ids, grads) from a request's payload, each checked against the header."""
    ids_bytes = field(header, "ids_bytes", int)
    if ids_bytes < 0 or ids_bytes % 8:
        raise WireError(f"ids_bytes: {ids_bytes} is not a multiple of 8 (ids are int64)")
    grads_bytes = field(header, "grads_bytes", int, 0) if with_grads else 0
    if ids_bytes + grads_bytes != len(payload):
        raise WireError(f"payload: {len(payload)} bytes, but ids_bytes + grads_bytes = {ids_bytes + grads_bytes}")
    ids = np.frombuffer(payload[:ids_bytes], np.int64)
    if not with_grads:
        return ids, None
    codec = field(header, "codec", str, "raw")
    if codec not in CODECS:
        raise WireError(f"codec: unknown codec {codec!r}; this server reads {list(CODECS)}")
    dtype = field(header, "dtype", str, "float32")
    if dtype not in DTYPES:
        raise WireError(f"dtype: unknown dtype {dtype!r}; this server reads {list(DTYPES)}")
    dim = field(header, "dim", int)
    if dim < 1 or grads_bytes != len(ids) * dim * 4:
        raise WireError(f"grads_bytes: {grads_bytes} is not len(ids) x dim x 4 = {len(ids)} x {dim} x 4")
    grads = np.frombuffer(payload[ids_bytes:], DTYPES[dtype]).reshape(len(ids), dim)
    return ids, grads
