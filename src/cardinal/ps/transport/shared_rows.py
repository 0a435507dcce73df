"""A pull's rows through shared memory when a client and its server share a host.

Over loopback gRPC the rows of a pull were copied seven times (into the reply, into gRPC's
buffer, into the kernel and out of it, into gRPC Python's pieces, joined into one ``bytes``,
into their destination) and most of a pull's time, on both sides, went to those copies: at dim
64 a 65,536-id pull took ~4 ms of the server's CPU and ~4.5 of the client's, the table's
lookup ~1 of them (docs/performance.md). With the rows in shared memory they are copied once,
as in process: the table writes them into a region the client mapped, which the caller is
handed (rows of another codec: decoded from there into their destination); ids still cross in
the request, a header in the reply.

How: a client on Linux names, in each pull to a server that offers it (its ``Stats`` limits
say ``shared_rows`` and ``region_offsets``), a ``Region``: a file in /dev/shm it made, named
``cardinal-`` and 32 random hex digits, and where in it each part of the pull goes (``shm_at``).
A server that can open that file writes the rows there and says so (``"shm": true``, an empty
payload); one that cannot answers as always, with the rows in the reply, and the client names no
more regions to it. Which server shares the client's host needs no asking: the name is random,
so only a server that sees the client's /dev/shm finds it. Once its server has written a region,
the client unlinks the file (both keep their mappings): a client that crashes leaves nothing
behind. A region serves one pull at a time; one whose call failed or timed out is dropped, as
its server may still write it.

fp32 rows are not copied on the client: the pull's result is the region itself, lent to the
caller (``Regions.lend``), and the region serves another pull only once that array and every
view of it are gone; rows of other codecs are decoded from the region into a new array, and the
region is free again at once.

A server opens only regular files so named in /dev/shm, owned by its own user, not through a
link, and keeps at most ``MAPPED`` of them mapped; a server under a memory budget offers none
(the pages it maps would count against its budget). A region's pages are allocated when it is
made (``posix_fallocate``): a full /dev/shm (64 MiB in a container by default) refuses the
region, and that call's rows come in the reply, instead of a server writing into a page
tmpfs has no room for (SIGBUS). A client keeps at most ``keep`` free regions per server, each
a quarter larger than the pull it was made for (in MiB), so that pulls of about that size reuse it.
"""

import contextlib
import ctypes
import mmap
import os
import re
import secrets
import stat
import threading
import weakref
from collections import OrderedDict, deque
from pathlib import Path

import numpy as np

from cardinal.ps.validate import quote

DIR = Path("/dev/shm")
PREFIX = "cardinal-"
NAME = re.compile(PREFIX + "[0-9a-f]{32}")
MAPPED = 256  # regions a server keeps mapped (clients' calls in flight, and a few dropped)
MAX_REGION = 1 << 30
PAGE = 1 << 20  # regions are sized in MiB


def available() -> bool:
    """Whether this host has a /dev/shm to make regions in."""
    return DIR.is_dir() and os.access(DIR, os.W_OK)


class Region:
    """A file in /dev/shm of at least ``size`` bytes, mapped: where one call's rows are written."""

    def __init__(self, size: int):
        self.size = -(-max(size, 1) // PAGE) * PAGE
        self.name = PREFIX + secrets.token_hex(16)
        path = DIR / self.name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._unlink = weakref.finalize(self, _unlink, path)  # at the latest when dropped, or at exit
        try:
            os.posix_fallocate(fd, 0, self.size)  # its pages now, or ENOSPC: never a SIGBUS in the server
            self.map = mmap.mmap(fd, self.size)
            self.view = np.frombuffer(self.map, np.uint8)
        except BaseException:
            self._unlink()
            raise
        finally:
            os.close(fd)

    def shared(self) -> None:
        """Its server mapped it: the file is no longer needed (the mappings stay)."""
        self._unlink()


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class Regions:
    """A client's free regions, per shard: ``take`` one for a pull, ``give`` it back once the
    call answered and its rows were read, or ``lend`` it to the caller as the pull's result."""

    def __init__(self, n_shards: int, keep: int):
        self._free: list[list[Region]] = [[] for _ in range(n_shards)]
        self._back: list[deque[Region]] = [deque() for _ in range(n_shards)]  # given back, not yet sorted in
        self._keep, self._lock = keep, threading.Lock()

    def take(self, shard: int, size: int) -> Region | None:
        """The smallest free region of at least ``size`` bytes, or a new one (the smallest free
        one dropped to make room when ``keep`` are free); None when /dev/shm has no room for it,
        or no server would open one so large (the rows then come in the reply)."""
        if size > MAX_REGION:
            return None
        with self._lock:
            free, back = self._free[shard], self._back[shard]
            while back:
                free.append(back.popleft())
            fits = [r for r in free if r.size >= size]
            if fits:
                region = min(fits, key=lambda r: r.size)
                free.remove(region)
                return region
            free.sort(key=lambda r: r.size)
            del free[:max(0, len(free) - self._keep + 1)]
        try:
            return Region(min(size + size // 4, MAX_REGION))
        except OSError:
            return None

    def give(self, shard: int, region: Region) -> None:
        """``region`` is free again. No lock: this runs in a lent array's finalizer, at whatever
        moment the array is collected (a deque's append is atomic)."""
        self._back[shard].append(region)

    def lend(self, shard: int, region: Region, size: int) -> np.ndarray:
        """The region's first ``size`` bytes as a (size,) uint8 array of the caller's: the region
        is given back once that array and every view of it (numpy's, torch's) are gone."""
        memory = (ctypes.c_uint8 * size).from_buffer(region.map)  # the base of every view of the array
        weakref.finalize(memory, self.give, shard, region)
        return np.frombuffer(memory, np.uint8)

    def clear(self, shard: int | None = None) -> None:
        with self._lock:
            for s in range(len(self._free)) if shard is None else (shard,):
                self._free[s].clear()
                self._back[s].clear()


class Mapped:
    """A server's view of its clients' regions, by name: each opened once, the last ``MAPPED``
    used kept mapped."""

    def __init__(self):
        self._maps: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name, size: int, at: int = 0) -> np.ndarray | None:
        """The region's ``size`` bytes from byte ``at``, writable; None when this server cannot
        open it (another host's, gone) or it is smaller. A name that is not a region's, or an
        offset outside any region, is a ValueError."""
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(f"shm: {quote(str(name))} is not a region's name ({PREFIX} and 32 hex digits)")
        if not 0 <= at <= MAX_REGION:
            raise ValueError(f"shm_at: {at if abs(at) < 1 << 64 else 'a huge number'} is not an offset within a region "
                             f"(0 to {MAX_REGION})")
        with self._lock:
            view = self._maps.get(name)
            if view is None:
                view = _open(DIR / name)
                if view is None:
                    return None
                self._maps[name] = view
                while len(self._maps) > MAPPED:
                    self._maps.popitem(last=False)
            else:
                self._maps.move_to_end(name)
        return view[at:at + size] if at + size <= len(view) else None


def _open(path: Path) -> np.ndarray | None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or not 0 < st.st_size <= MAX_REGION:
            return None
        return np.frombuffer(mmap.mmap(fd, st.st_size), np.uint8)
    finally:
        os.close(fd)
