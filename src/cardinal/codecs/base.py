"""What a codec is: a way to store (n, dim) float32 rows in fewer bytes, and back.

    codec.encode(rows)          (n, dim) float32  ->  (n * codec.row_bytes(dim),) uint8
    codec.decode(data, n, dim)  bytes-like        ->  (n, dim) float32
    codec.roundtrip(rows)       decode(encode(rows)): what the other side will see

Both take ``out=``, the array to write into (a message being built, the caller's destination),
so that rows cross between a table and a message with no array in between.

Codecs know nothing of messages or files: the wire (``ps/transport``) and, later, row storage
use the same ones, so a row read back from either is the same number. ``decode`` checks the
size of what it is given (a short or long buffer is a ValueError naming both sizes), since
its input may come from another process; ``encode`` trusts its caller's float32 array.
"""

from abc import ABC, abstractmethod

import numpy as np


class Codec(ABC):
    name: str
    overflow: float | None = None  # the least magnitude this codec turns into inf (None: none does)

    @abstractmethod
    def row_bytes(self, dim: int) -> int:
        """Bytes one encoded row of ``dim`` values takes."""

    @abstractmethod
    def _encode(self, rows: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """(n, dim) C-contiguous float32 -> (n * row_bytes(dim),) uint8: ``out`` when given."""

    @abstractmethod
    def _decode(self, data: np.ndarray, n: int, dim: int, out: np.ndarray | None) -> np.ndarray:
        """(n * row_bytes(dim),) uint8 -> (n, dim) float32: ``out`` when given."""

    def encode(self, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``out``: a writable (n * row_bytes(dim),) uint8 array to encode into (fp32 then copies
        the rows into it; without it fp32 returns a view of the rows)."""
        if not isinstance(rows, np.ndarray) or rows.ndim != 2 or rows.dtype != np.float32:
            raise TypeError(f"codec {self.name}: rows must be a (n, dim) float32 array, got "
                            f"{getattr(rows, 'dtype', type(rows).__name__)} of shape {getattr(rows, 'shape', '?')}")
        size = len(rows) * self.row_bytes(rows.shape[1])
        if out is not None and (out.dtype != np.uint8 or out.shape != (size,) or not out.flags.c_contiguous):
            raise ValueError(f"codec {self.name}: out must be a contiguous ({size},) uint8 array, got "
                             f"{out.dtype} of shape {out.shape}")
        encoded = self._encode(np.ascontiguousarray(rows), out)
        assert encoded.dtype == np.uint8 and encoded.size == size and (out is None or encoded is out)
        return encoded

    def decode(self, data, n: int, dim: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows from ``data`` (bytes, memoryview or uint8 array), into ``out`` ((n, dim) float32,
        C-contiguous) when given. Without ``out`` the result may share memory with ``data``
        (fp32: no copy), so it is read-only when ``data`` is."""
        buf = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        buf = buf.reshape(-1).view(np.uint8)
        expected = n * self.row_bytes(dim)
        if n < 0 or dim < 1 or buf.size != expected:
            raise ValueError(f"codec {self.name}: {buf.size} bytes for {n} rows of dim {dim}, expected "
                             f"{n} x {self.row_bytes(dim) if dim >= 1 else '?'} = {expected}")
        if out is not None and (out.dtype != np.float32 or out.shape != (n, dim) or not out.flags.c_contiguous):
            raise ValueError(f"codec {self.name}: out must be a contiguous ({n}, {dim}) float32 array, got "
                             f"{out.dtype} of shape {out.shape}")
        return self._decode(buf, n, dim, out)

    def roundtrip(self, rows: np.ndarray) -> np.ndarray:
        """The rows as the receiving side decodes them (bitwise what the wire delivers)."""
        return self.decode(self.encode(rows), *rows.shape)

    def __repr__(self) -> str:
        return f"<codec {self.name}>"
