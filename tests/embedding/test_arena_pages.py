"""Arenas ask the kernel for transparent huge pages: rows and index slots are read at random,
and with 4 KiB pages nearly every such read would also miss the TLB."""

import mmap
import sys

import numpy as np
import pytest

from cardinal.embedding.arena import Arena


def vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping holding ``address`` (Linux /proc/self/smaps)."""
    flags, inside = None, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("VmFlags:"):
                flags = line.split()[1:]
    assert flags is not None, "no mapping holds the arena"
    return flags


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"),
                    reason="transparent huge pages are a Linux feature")
def test_arenas_ask_for_huge_pages_when_created_and_grown():
    arena = Arena(np.float32, (16,), capacity=1 << 16)
    assert "hg" in vm_flags(arena.array.ctypes.data)
    arena.reserve(1 << 20)  # remapped, possibly moved
    assert "hg" in vm_flags(arena.array.ctypes.data)
