"""The wire format of the gRPC transport: a small JSON header, then raw array bytes.

    [ uint32 LE: header length | header (JSON, utf-8) | payload bytes ]

The header is padded with spaces (JSON's whitespace) so that the payload starts ``ALIGN``
bytes into the message: its arrays are then aligned wherever the message is, and viewed, not
copied, by the kernels that read or write them (a pull's rows are written straight into the
reply: ``encode_blank``).

A pull's payload is the ids (int64, little-endian); a push's is the ids then the gradients,
encoded by the codec its header names, then, for a counted push only, its counts (int32,
``counts_bytes`` in the header; absent: one update per row); a pull's reply is the rows,
encoded by the codec the pull named (``cardinal.codecs``: fp32, fp16, bf16, int8; "raw" is
fp32; fp32 requests name no codec in a pull and "raw" in a push, as servers from before codecs
read), or, when the pull named a region of shared memory its server could open (``shm``, the
rows from byte ``shm_at`` of it, 0 when absent), an empty payload and ``"shm": true``: the rows
are in the region (``shared_rows.py``). Both sides
keep float32: a codec is only how rows cross. The
header says how many bytes each part has, so a malformed message is caught before anything
is read from it:

    {"v": 1, "shard": 0, "n_shards": 2, "table": "emb", "ids_bytes": 8192, "ids_dtype": "int64",
     "grads_bytes": 32768, "dim": 16, "dtype": "float32", "codec": "bf16", "step": 12,
     "request_id": "c1f0-17"}

Every field of a request is checked against its method's schema (``SCHEMAS``): unknown fields
and mistyped ones (JSON booleans are not integers) are refused, nesting is at most
``MAX_DEPTH`` deep (checked before parsing), and errors quote at most a short prefix of any
string the sender chose.

A part of a checkpoint (``checkpoint/parts.py``: a ``ReadPart`` reply, and the ``Load`` that passes
it on to the shard that asked) is named arrays: ``"arrays": [[name, dtype, shape], ...]`` in the
header, their bytes (little-endian) in that order in the payload (``encode_arrays``).

Arrays cross without per-element encoding (``np.frombuffer`` on arrival, no copy) unless a
codec other than fp32 is asked for; a pull's rows are decoded straight into their destination
(``rows_from_reply``'s ``out``).
"""

import json
import re
import struct

import numpy as np

from cardinal import codecs
from cardinal.codecs import Codec
from cardinal.ps.transport import buffers
from cardinal.ps.validate import quote

SERVICE = "cardinal.Shard"  # the gRPC service: /cardinal.Shard/Pull, Push, Save, Load, ReadPart, Stats, Finish
PROTOCOL = 1
CODEC_ALIASES = {"raw": "fp32"}  # the push codec's name before there were codecs
DTYPES = {"float32": np.float32}
IDS_DTYPES = {"int64": np.int64}
_LEN = struct.Struct("<I")
MAX_HEADER = 1 << 14
ALIGN = 16  # where a payload starts in its message (the header padded): as CPython aligns a bytes object's data
MAX_DEPTH = 8  # requests are flat; replies (stats) nest a few levels
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")

ORIGIN = {"worker": int, "workers": int, "part": int, "parts": int, "combine": bool, "staleness": int,
          "since": int}
_TARGET = {"v": int, "shard": int, "n_shards": int}
_PART = {"end": int, "total": int, "arrays": list}  # a part of a checkpoint (checkpoint/parts.py)
_ARRAYS = {"table": str, "ids_bytes": int, "ids_dtype": str, "step": int, "request_id": str}
SCHEMAS: dict[str, dict[str, type]] = {
    "Pull": {**_TARGET, **_ARRAYS, "create": bool, "codec": str, "shm": str, "shm_at": int},
    "Push": {**_TARGET, **_ARRAYS, "grads_bytes": int, "dim": int, "dtype": str, "codec": str, "kind": str,
             **ORIGIN, "counts_bytes": int},
    "Save": {**_TARGET, "root": str, "step": int, "base": int, "dry": bool, "keep": int},
    "Load": {**_TARGET, "path": str, "phase": str, "token": str, "commits": int, **_PART},
    "ReadPart": {**_TARGET, "path": str, "commit": int, "step": int, "part": int, "table": str, "into": str,
                 "kind": str, "lo": int, "hi": int, "to": int, "max_bytes": int},
    "Stats": {**_TARGET, "digest": bool, "check": bool},
    "Finish": {**_TARGET, "step": int},  # the job ended with its checkpoint of this step (ps/server/process.py)
}
ARRAY_DTYPES = ("int64", "int32", "uint32", "uint8", "float32", "float64")  # of a checkpoint's parts


class WireError(ValueError):
    """A message that cannot be decoded; the text names the field at fault."""


def encode(header: dict, *payload: np.ndarray | bytes) -> bytes:
    """One message; arrays are copied once, straight into it."""
    head = _head(header)
    parts = [p if isinstance(p, bytes) else memoryview(np.ascontiguousarray(p).reshape(-1).view(np.uint8))
             for p in payload]  # 1-d bytes: empty arrays too
    return b"".join([_LEN.pack(len(head)), head, *parts])


def encode_blank(header: dict, size: int) -> tuple[bytes, np.ndarray]:
    """One message of ``header`` and ``size`` payload bytes not yet written, and a writable
    (size,) uint8 view of that payload (aligned) to write them into before the message is sent."""
    head = _head(header)
    message, memory = buffers.blank(_LEN.size + len(head) + size)
    _LEN.pack_into(memory, 0, len(head))
    memory[_LEN.size:_LEN.size + len(head)] = np.frombuffer(head, np.uint8)
    return message, memory[_LEN.size + len(head):]


def _head(header: dict) -> bytes:
    """The header's JSON, padded with spaces to end ``ALIGN``-aligned after the length before it."""
    head = json.dumps(header, separators=(",", ":")).encode()
    return head + b" " * (-(_LEN.size + len(head)) % ALIGN)


def decode(message: bytes) -> tuple[dict, memoryview]:
    if len(message) < _LEN.size:
        raise WireError("message: too short for a header length")
    (n,) = _LEN.unpack_from(message)
    if n > MAX_HEADER:
        raise WireError(f"header: {n} bytes, over the {MAX_HEADER}-byte limit")
    if _LEN.size + n > len(message):
        raise WireError(f"header: length {n} does not fit the message ({len(message)} bytes)")
    head = bytes(message[_LEN.size:_LEN.size + n])
    _check_depth(head)
    try:
        header = json.loads(head)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # ValueError: also ints past 4300 digits
        raise WireError(f"header: not JSON ({str(e)[:80]})") from None
    if not isinstance(header, dict):
        raise WireError("header: must be a JSON object")
    return header, memoryview(message)[_LEN.size + n:]


def _check_depth(head: bytes) -> None:
    """Refuse headers nested deeper than ``MAX_DEPTH`` before ``json.loads`` recurses into them."""
    if head.count(b"[") + head.count(b"{") <= MAX_DEPTH:  # too few brackets to nest deeper: every
        return                                              # request and most replies, unparsed
    depth = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub(b"", head)):
        depth += 1 if bracket in b"[{" else -1
        if depth > MAX_DEPTH:
            raise WireError(f"header: nested deeper than {MAX_DEPTH} levels")


def check_schema(method: str, header: dict) -> None:
    """Every field known to ``method`` and of its type (a bool is not an int)."""
    schema = SCHEMAS[method]
    for name, value in header.items():
        kind = schema.get(name)
        if kind is None:
            raise WireError(f"header: unknown field {quote(name)} for {method}; it takes {sorted(schema)}")
        if value is not None and not _is(value, kind):
            raise WireError(f"{name}: expected {kind.__name__}, got {type(value).__name__}")


def _is(value, kind: type) -> bool:
    return isinstance(value, kind) and (kind is not int or not isinstance(value, bool))


def field(header: dict, name: str, kind: type, default=None):
    """A header field of the given type; missing or mistyped fields are named."""
    value = header.get(name, default)
    if value is None or not _is(value, kind):
        raise WireError(f"{name}: expected {kind.__name__}, got {type(value).__name__ if value is not None else 'nothing'}")
    return value


def split_payload(header: dict, payload: memoryview, with_grads: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(ids, grads) from a request's payload, each checked against the header."""
    ids_dtype = field(header, "ids_dtype", str)
    if ids_dtype not in IDS_DTYPES:
        raise WireError(f"ids_dtype: unknown dtype {quote(ids_dtype)}; ids are {list(IDS_DTYPES)}")
    ids_bytes = field(header, "ids_bytes", int)
    if not 0 <= ids_bytes <= len(payload) or ids_bytes % 8:
        raise WireError(f"ids_bytes: {_num(ids_bytes)} is not a multiple of 8 within the payload (ids are int64)")
    grads_bytes = field(header, "grads_bytes", int, 0) if with_grads else 0
    if ids_bytes + grads_bytes != len(payload):
        raise WireError(f"payload: {len(payload)} bytes, but ids_bytes + grads_bytes = "
                        f"{_num(ids_bytes)} + {_num(grads_bytes)}")
    ids = np.frombuffer(payload[:ids_bytes], np.int64)
    if not with_grads:
        return ids, None
    codec = codec_of(header)
    dtype = field(header, "dtype", str, "float32")
    if dtype not in DTYPES:
        raise WireError(f"dtype: unknown dtype {quote(dtype)}; this server reads {list(DTYPES)}")
    dim = field(header, "dim", int)
    if not 1 <= dim <= 1 << 20 or grads_bytes != len(ids) * codec.row_bytes(dim):
        raise WireError(f"grads_bytes: {_num(grads_bytes)} is not len(ids) x the {codec.name} row's bytes = "
                        f"{len(ids)} x {codec.row_bytes(dim) if 1 <= dim <= 1 << 20 else '?'} (dim {_num(dim)})")
    grads = codec.decode(payload[ids_bytes:], len(ids), dim)
    return ids, grads


def with_counts(header: dict, counts: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """A push's counts as its payload's last part (int32 LE), ``counts_bytes`` set in ``header``;
    nothing for None (the header then has no ``counts_bytes``: one update per row)."""
    if counts is None:
        return ()
    counts = np.ascontiguousarray(counts, "<i4")
    header["counts_bytes"] = counts.nbytes
    return (counts,)


def take_counts(header: dict, payload: memoryview) -> tuple[memoryview, np.ndarray | None]:
    """(the payload without its counts, the counts or None): counts are the last ``counts_bytes``
    of a push's payload; ``split_payload`` then reads the rest as before."""
    if "counts_bytes" not in header:
        return payload, None
    n = field(header, "counts_bytes", int)
    if not 0 <= n <= len(payload) or n % 4:
        raise WireError(f"counts_bytes: {_num(n)} is not a multiple of 4 within the payload (counts are int32)")
    cut = len(payload) - n
    return payload[:cut], np.frombuffer(payload[cut:], "<i4").astype(np.int32)


def encode_arrays(arrays: dict) -> tuple[list, list[np.ndarray]]:
    """Named arrays as a header's list of [name, dtype, shape] and the payload's parts, in that order."""
    spec = [[name, a.dtype.name, list(a.shape)] for name, a in arrays.items()]
    return spec, [np.ascontiguousarray(a) for a in arrays.values()]


def decode_arrays(spec, payload: memoryview) -> dict:
    """The named arrays ``encode_arrays`` sent (little-endian), each checked against the payload."""
    if not isinstance(spec, list) or len(spec) > 64:
        raise WireError("arrays: must be a list of [name, dtype, shape]")
    out, at = {}, 0
    for item in spec:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and len(item[0]) <= 64
                and item[1] in ARRAY_DTYPES and isinstance(item[2], list) and len(item[2]) <= 2
                and all(_is(d, int) and 0 <= d < 1 << 40 for d in item[2])) or item[0] in out:
            raise WireError(f"arrays: {quote(str(item))} is not [a new name, one of {list(ARRAY_DTYPES)}, a shape]")
        dtype = np.dtype(item[1]).newbyteorder("<")
        size = dtype.itemsize * int(np.prod(item[2], dtype=np.int64))
        if at + size > len(payload):
            raise WireError(f"arrays: {quote(item[0])} needs {size} bytes, the payload has {len(payload) - at} left")
        out[item[0]] = np.frombuffer(payload[at:at + size], dtype).reshape(item[2])
        at += size
    if at != len(payload):
        raise WireError(f"arrays: {at} bytes named, the payload holds {len(payload)}")
    return out


def push_codec_name(codec: Codec) -> str:
    """What a push's header names: fp32 as "raw", which servers from before codecs read too."""
    return "raw" if codec.name == "fp32" else codec.name


def codec_of(header: dict) -> Codec:
    """The codec a header names (fp32 when it names none); an unknown one is named."""
    name = field(header, "codec", str, "fp32")
    name = CODEC_ALIASES.get(name, name)
    if name not in codecs.CODECS:
        raise WireError(f"codec: unknown codec {quote(name)}; this server reads {list(codecs.CODECS)}")
    return codecs.get(name)


def rows_from_reply(header: dict, payload: memoryview, n: int, codec: Codec,
                    out: np.ndarray | None = None) -> np.ndarray:
    """A pull reply's (n, dim) float32 rows, checked against the codec the pull asked for
    ((0, dim) from copies of hot rows past their bound, marked "stale"), decoded into ``out``
    when it is that (n, dim) array. Without ``out`` they may share memory with ``payload`` (fp32)."""
    n = 0 if header.get("stale") is True else n
    if header.get("dtype") != "float32" or header.get("codec", "fp32") != codec.name:
        raise WireError(f"codec: a pull reply of {header.get('codec', 'fp32')!r} rows, dtype {header.get('dtype')!r}; "
                        f"the pull asked for {codec.name!r} rows of float32")
    dim = header.get("dim")
    if not _is(dim, int) or not 1 <= dim <= 1 << 20 or len(payload) != n * codec.row_bytes(dim):
        raise WireError(f"payload: a pull reply of {len(payload)} bytes for {n} rows of dim {dim} ({codec.name})")
    return codec.decode(payload, n, dim, out if out is not None and out.shape == (n, dim) else None)


def _num(n: int) -> str:
    """An integer the sender chose, for an error message (JSON ints can have thousands of digits)."""
    return str(n) if abs(n) < 10**20 else "a huge number"
