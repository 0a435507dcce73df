"""A growable array whose growth never copies its contents.

An ``Arena`` is an anonymous memory map viewed as a numpy array. Growing it calls
``mremap`` (through ``mmap.resize``), which moves page-table entries rather than bytes:
doubling an 8 GiB arena takes well under a millisecond, so a table never pauses to copy
every row. Pages that were never written take no memory, and ``release`` hands whole pages
back to the OS (``MADV_DONTNEED``), which is how the hash index frees a sub-table it has
outgrown. Fresh pages read as zero. Maps ask for transparent huge pages (``MADV_HUGEPAGE``):
rows and index slots are read at random, and with 4 KiB pages nearly every read also misses
the TLB (measured: about 2x on lookups of a 4M-row table); the cost is at most one partly
used 2 MiB page at an arena's end.

On a platform without ``mremap`` the arena falls back to allocate-and-copy growth.

The arena keeps one view of its map (``.array``). Callers must not hold that view across a
call that may grow the arena: ``mmap`` refuses to resize while a view is exported, so a
stale view fails loudly (``BufferError``) instead of reading freed memory.
"""

import mmap

import numpy as np

PAGE = mmap.PAGESIZE


class Arena:
    def __init__(self, dtype, row_shape: tuple[int, ...] = (), capacity: int = 1024):
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))
        self._capacity = 0
        self._map: mmap.mmap | None = None
        self.array = np.empty((0, *self.row_shape), self.dtype)
        self.reserve(max(1, capacity))

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def nbytes(self) -> int:
        """Bytes of address space held (pages never written use no memory)."""
        return self._capacity * self.row_bytes

    def reserve(self, n: int) -> None:
        """Make room for at least ``n`` rows, doubling so that growth is amortised."""
        if n <= self._capacity:
            return
        capacity = max(n, 2 * self._capacity)
        size = max(PAGE, capacity * self.row_bytes)
        if self._map is None:
            self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        else:
            self.array = None  # drop our own export so the map may be resized
            try:
                self._map.resize(size)
            except BufferError:  # someone still holds a view: keep the arena as it was
                self._view(self._capacity)
                raise
            except (SystemError, OSError):  # no mremap on this platform: copy once
                old, self._map = self._map, mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
                self._map[: len(old)] = old
                old.close()
        if hasattr(mmap, "MADV_HUGEPAGE"):  # random row and slot reads: one TLB entry per 2 MiB, not 4 KiB
            self._map.madvise(mmap.MADV_HUGEPAGE)
        self._view(capacity)

    def _view(self, capacity: int) -> None:
        self._capacity = capacity
        flat = np.frombuffer(self._map, self.dtype, count=capacity * int(np.prod(self.row_shape, dtype=np.int64)))
        self.array = flat.reshape((capacity, *self.row_shape))

    def truncate(self, size: int, new_size: int) -> None:
        """Rows [new_size, size) are no longer used: zero them (new rows start from zeros) and
        return every whole page from ``new_size`` on to the OS."""
        self.array[new_size:size] = 0
        self.release(new_size, self._capacity)

    def release(self, start: int, stop: int) -> None:
        """Return the whole pages inside rows [start, stop) to the OS; they read as zero after."""
        lo = -(-start * self.row_bytes // PAGE) * PAGE
        hi = stop * self.row_bytes // PAGE * PAGE
        if hi > lo and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def close(self) -> None:
        """Unmap the arena now (not when the last reference goes): its memory is back with the OS.
        Raises ``BufferError`` while a view of it is held elsewhere."""
        self.array = None
        if self._map is not None:
            self._map.close()
            self._map = None
        self._capacity = 0
