"""The batch prefetcher: same batches, the reader's errors where they happened, a thread that stops."""

import threading
import time

import numpy as np
import pytest

from cardinal.data import CriteoReader
from cardinal.data.prefetch import prefetched

DEADLINE_S = 10.0


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cardinal-prefetch"]


def wait_until(condition) -> bool:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def tsv_line(label: int, value: int) -> str:
    return "\t".join([str(label), *[str(value)] * 13, *[f"{value:08x}"] * 26])


def write_tsv(path, bad_at: int | None, n: int = 12):
    lines = [tsv_line(i % 2, i) for i in range(n)]
    if bad_at is not None:
        lines[bad_at] = "not\ta\tcriteo\tline"
    path.write_text("\n".join(lines) + "\n")
    return path


def read_all(batches) -> tuple[list, BaseException | None]:
    """Every batch until the end or the first error, and that error."""
    got = []
    try:
        for b in batches:
            got.append(b)
    except ValueError as error:
        return got, error
    return got, None


def test_the_same_batches_in_the_same_order(tmp_path):
    reader = CriteoReader([write_tsv(tmp_path / "a.tsv", None)], batch_size=5)
    want, _ = read_all(iter(reader))
    got, error = read_all(prefetched(reader))
    assert error is None and len(got) == len(want) == 3
    for a, b in zip(got, want):
        assert a.dense.numpy().tobytes() == b.dense.numpy().tobytes()
        assert a.labels.numpy().tobytes() == b.labels.numpy().tobytes()
        for field in b.sparse:
            np.testing.assert_array_equal(a.sparse[field].values, b.sparse[field].values)
    assert list(prefetched([])) == []
    assert wait_until(lambda: not prefetch_threads())


def test_a_bad_row_error_reaches_the_consumer_after_the_batches_before_it(tmp_path):
    path = write_tsv(tmp_path / "a.tsv", bad_at=7)
    line = len(tsv_line(0, 0)) + 3
    reader = CriteoReader([path], batch_size=2, strict=True, chunk_bytes=line)  # about a line per chunk
    want, want_error = read_all(iter(reader))
    got, error = read_all(prefetched(reader))
    assert want_error is not None and "a.tsv:8" in str(want_error)
    assert len(got) == len(want) == 3  # the batches of lines 1-6, then the error at line 8
    assert type(error) is type(want_error) and str(error) == str(want_error)
    assert wait_until(lambda: not prefetch_threads())


def test_any_error_is_raised_as_itself_at_its_place():
    failure = KeyError("boom")

    def source():
        yield 1
        yield 2
        raise failure

    it = prefetched(source())
    assert [next(it), next(it)] == [1, 2]
    with pytest.raises(KeyError) as caught:
        next(it)
    assert caught.value is failure


def endless(state: dict):
    state["made"] = 0
    try:
        while True:
            state["made"] += 1
            yield state["made"]
    finally:
        state["closed"] = True


def test_an_early_stop_stops_the_thread_and_closes_the_reader():
    state: dict = {}
    source = endless(state)  # held here too: the thread must close it, not the garbage collector
    it = prefetched(source)
    assert next(it) == 1
    it.close()
    assert not prefetch_threads()  # close() waits for the thread
    assert state.get("closed")


def test_dropping_the_iterator_stops_the_thread():
    state: dict = {}
    for item in prefetched(endless(state)):
        if item == 3:
            break  # the loop held the only reference
    assert wait_until(lambda: not prefetch_threads())
    assert state.get("closed")


def test_the_reader_runs_ahead_by_at_most_the_depth():
    state: dict = {}
    it = prefetched(endless(state), depth=2)
    next(it)
    # one handed over, two queued, one made and waiting for room
    assert wait_until(lambda: state["made"] >= 4)
    time.sleep(0.2)
    assert state["made"] == 4
    it.close()


def test_depth_below_one_is_refused():
    with pytest.raises(ValueError, match="depth"):
        prefetched([1], depth=0)
