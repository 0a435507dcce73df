"""Arrays sent between processes as shared memory (``serve/shared.py``): the receiver maps the
sender's very pages, read-only; small or unshared arrays travel in the pickle."""

import os
import socket
import threading

import numpy as np
import pytest

from cardinal.serve import shared


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def through(pair, obj, share: bool = False):
    """``obj`` sent on one end and received on the other (the sending on a thread: a socket's buffer
    holds less than some pickles)."""
    sender = threading.Thread(target=shared.send, args=(pair[0], obj, share))
    sender.start()
    got = shared.recv(pair[1])
    sender.join()
    return got


def fd_of(a: np.ndarray) -> int:
    m = shared._mapping(a)
    assert m is not None, "not a whole shared mapping"
    return m.fd


def test_a_shared_array_arrives_as_the_same_pages_read_only(pair):
    big = shared.to_shared(np.arange(100_000, dtype=np.float32).reshape(-1, 4))
    small = np.arange(3, dtype=np.int64)
    got = through(pair, {"big": big, "small": small, "empty": np.empty((0, 4), np.float16)})
    np.testing.assert_array_equal(got["big"], big)
    assert got["big"].dtype == big.dtype and got["big"].shape == big.shape
    assert not got["big"].flags.writeable and not big.flags.writeable
    assert os.fstat(fd_of(got["big"])).st_ino == os.fstat(fd_of(big)).st_ino  # the same memory, no copy
    np.testing.assert_array_equal(got["small"], small)
    assert shared._mapping(got["small"]) is None  # in the pickle
    assert got["empty"].shape == (0, 4) and got["empty"].dtype == np.float16


def test_share_copies_the_larger_heap_arrays_once_and_not_the_shared_ones(pair):
    heap = np.ones((50_000, 2), np.float32)
    already = shared.to_shared(np.zeros(50_000, np.int64))
    a, b = through(pair, (heap, already))
    assert shared._mapping(a) is None and shared._mapping(b) is not None  # only what was shared
    a, b = through(pair, (heap, already), share=True)
    np.testing.assert_array_equal(a, heap)
    assert shared._mapping(a) is not None
    assert os.fstat(fd_of(b)).st_ino == os.fstat(fd_of(already)).st_ino


def test_more_arrays_than_one_message_carries_descriptors(pair):
    arrays = [shared.to_shared(np.full(20_000, k, np.int32)) for k in range(shared.MAX_FDS + 7)]
    got = through(pair, arrays)
    assert [int(a[0]) for a in got] == list(range(len(arrays)))


def test_a_view_of_part_of_a_mapping_travels_in_the_pickle(pair):
    whole = shared.to_shared(np.arange(40_000, dtype=np.int64))
    got = through(pair, whole[10:])
    np.testing.assert_array_equal(got, whole[10:])


def test_a_closed_end_is_eof(pair):
    pair[0].close()
    with pytest.raises(EOFError):
        shared.recv(pair[1])
