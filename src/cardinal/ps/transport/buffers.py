"""A ``bytes`` message written in place, for gRPC Python, which sends nothing else.

gRPC Python takes a message only as ``bytes`` (a bytearray or memoryview is refused), and
``bytes`` are immutable: built the plain way, a pull's reply is the rows pulled into an array,
then joined into the message, then copied by gRPC into its own buffer. ``blank(n)`` is a new
``bytes`` object of n bytes not yet written (``PyBytes_FromStringAndSize(NULL, n)``, whose
contents the C API lets its creator fill while it holds the only reference) and a writable
uint8 view of them, so that a table writes its rows straight into the message (servicer.py):
one copy fewer of every row a server sends, and no array of them in between.

The view keeps the message alive; the message must not be handed on (to gRPC, or anywhere it
may be hashed or shared) before the view's writes are done.
"""

import ctypes

import numpy as np

_new = ctypes.pythonapi.PyBytes_FromStringAndSize
_new.restype, _new.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_ssize_t)
_address = ctypes.pythonapi.PyBytes_AsString
_address.restype, _address.argtypes = ctypes.c_void_p, (ctypes.py_object,)


def blank(n: int) -> tuple[bytes, np.ndarray]:
    """(a new bytes object of ``n`` unwritten bytes, a writable (n,) uint8 view of them)."""
    if n < 1:  # size 0 is CPython's one shared empty bytes object: never written to
        raise ValueError(f"a blank message needs at least 1 byte, got {n}")
    message = _new(None, n)
    memory = (ctypes.c_uint8 * n).from_address(_address(message))
    memory.message = message  # the view's base holds the message
    return message, np.ctypeslib.as_array(memory)
