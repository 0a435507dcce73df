"""Aftercare: a request's evictions after its reply, in order; a failure told once, not forever."""

import threading

import pytest

from cardinal.ps.server.aftercare import Aftercare


def test_jobs_run_in_order_and_wait_sees_them_done():
    care, done, gate = Aftercare("t"), [], threading.Event()
    care.later(lambda: (gate.wait(5), done.append(1)))
    care.later(lambda: done.append(2))
    assert done == []
    gate.set()
    care.wait()
    assert done == [1, 2]
    care.close()


def test_a_failed_job_is_raised_once_and_the_store_goes_on():
    care, done = Aftercare("t"), []

    def full():
        raise OSError("disk tier full")
    care.later(full)
    with pytest.raises(OSError, match="disk tier full"):
        care.wait()
    care.wait()  # told once: the next request is not refused for the last one's eviction
    care.later(lambda: done.append(1))
    care.wait()
    assert done == [1]
    care.close()
