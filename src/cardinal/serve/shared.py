"""Arrays in shared memory, sent to another process as file descriptors: what a reload's child
made reaches the server without a copy and without unpickling rows under the interpreter lock.

    a = to_shared(array)               # a read-only copy in memory of its own (a memfd)
    send(sock, obj)                    # obj pickled; shared arrays as descriptors beside it,
    obj = recv(sock)                   # mapped read-only on arrival: the same pages, no copy

``send(..., share=True)`` first copies the larger arrays that are not shared (the server's tables
as an export loaded them). A shared array's memory goes when the last process maps it no more:
nothing is named, so a process killed leaves nothing behind.
"""

import io
import mmap
import os
import pickle
import socket
import struct
import tempfile

import numpy as np

SHARE_MIN = 1 << 16  # bytes: smaller arrays travel inside the pickle
MAX_FDS = 250        # descriptors a message (the kernel takes at most 253)
_HEADER = struct.Struct("<QI")  # pickle bytes, descriptors


class _Mapping(mmap.mmap):
    """A mapping that keeps its descriptor, to be sent on."""

    def __del__(self):
        os.close(self.fd)


def _new_fd(nbytes: int) -> int:
    fd = os.memfd_create("cardinal-shared", os.MFD_CLOEXEC) if hasattr(os, "memfd_create") else \
        os.dup(tempfile.TemporaryFile().fileno())
    os.ftruncate(fd, nbytes)
    return fd


def _map(fd: int, nbytes: int, writable: bool) -> _Mapping:
    """``fd`` mapped; the mapping owns it from here (closed with it, or now if it cannot be mapped)."""
    try:
        m = _Mapping(fd, nbytes, prot=mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
    except BaseException:
        os.close(fd)
        raise
    m.fd = fd
    return m


def to_shared(a: np.ndarray) -> np.ndarray:
    """``a``'s values in shared memory, read-only (an empty array: as it is)."""
    if a.nbytes == 0:
        return a
    m = _map(_new_fd(a.nbytes), a.nbytes, writable=True)
    out = np.frombuffer(m, a.dtype, a.size).reshape(a.shape)
    out[...] = a
    out.flags.writeable = False
    return out


def _mapping(a: np.ndarray) -> _Mapping | None:
    """The shared mapping ``a`` is the whole of, if any."""
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if isinstance(base, _Mapping) and a.flags.c_contiguous and a.nbytes == len(base) \
            and a.ctypes.data == np.frombuffer(base, np.uint8).ctypes.data:
        return base
    return None


def send(sock: socket.socket, obj, share: bool = False) -> None:
    fds, keep = [], []  # keep: the copies made here, open until sent

    def persistent_id(x):
        if not isinstance(x, np.ndarray):
            return None
        m = _mapping(x)
        if m is None:
            if not (share and x.nbytes >= SHARE_MIN):
                return None
            x = to_shared(x)
            m = _mapping(x)
            keep.append(m)
        fds.append(m.fd)
        return len(fds) - 1, x.dtype.str, x.shape

    buf = io.BytesIO()
    p = pickle.Pickler(buf, pickle.HIGHEST_PROTOCOL)
    p.persistent_id = persistent_id
    p.dump(obj)
    payload = buf.getvalue()
    sock.sendall(_HEADER.pack(len(payload), len(fds)))
    for k in range(0, len(fds), MAX_FDS):
        socket.send_fds(sock, [b"f"], fds[k:k + MAX_FDS])
    sock.sendall(payload)


def recv(sock: socket.socket):
    """The next object ``send`` sent; EOFError when the other end closed."""
    n, count = _HEADER.unpack(_exactly(sock, _HEADER.size))
    fds = []
    while len(fds) < count:
        _, got, _, _ = socket.recv_fds(sock, 1, min(MAX_FDS, count - len(fds)))
        if not got:
            raise EOFError
        fds.extend(got)
    payload = _exactly(sock, n)

    def persistent_load(pid):
        k, dtype, shape = pid
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return np.frombuffer(_map(os.dup(fds[k]), nbytes, writable=False), dtype, nbytes // dtype.itemsize).reshape(shape)

    try:
        u = pickle.Unpickler(io.BytesIO(payload))
        u.persistent_load = persistent_load
        return u.load()
    finally:
        for fd in fds:
            os.close(fd)


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError
        got += k
    return bytes(buf)
