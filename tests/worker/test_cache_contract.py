"""The worker cache's contract, against a model of the servers kept by the test itself:
(a) a row is read at most s updates behind its server, plus this worker's own gradients since
it was fetched, applied by the optimizer on the worker; (b) a worker holds at most h <= s
unpushed updates of a row; s = 0 is bitwise equal to no cache; flush leaves nothing held.

Every value a row takes on the servers is recorded (the stores' tables are wrapped), so the
true lag of a read is: updates the row has had - the version it was fetched as. The optimizer
is SGD, whose step needs no state: a read is that version moved by each own gradient since."""

import threading
from collections import defaultdict

import numpy as np
import pytest
import torch

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.worker.sources import PSSource
from cardinal.worker.sources.cache import CachedSource

DIM = 4
LR = np.float32(0.1)
CONFIG = StoreConfig((TableConfig("a", DIM, init_scale=0.5),), {"name": "sgd", "lr": float(LR)})


class Versions:
    """Every value each row had on the servers (index = updates applied to it), and how many
    training steps' gradients it had taken in by then (a counted update brings several)."""

    def __init__(self, client):
        self.lock = threading.Lock()
        self.history: dict[int, list[bytes]] = defaultdict(list)
        self.steps_in: dict[int, list[int]] = defaultdict(list)
        for store in client.transport.stores:
            for table in store.tables.values():
                self._wrap(table)

    def _wrap(self, table):
        push, pull = table.push, table.pull

        def record(ids, counts):
            rows = pull(ids, create=False)
            for i, row, c in zip(ids.tolist(), rows, counts):
                self.history[i].append(row.tobytes())
                self.steps_in[i].append((self.steps_in[i][-1] if self.steps_in[i] else 0) + int(c))

        def pushed(ids, grads, **kw):
            with self.lock:
                push(ids, grads, **kw)
                counts = kw.get("counts")
                counts = np.ones(len(ids), np.int64) if counts is None else counts
                unique, first = np.unique(ids, return_index=True)
                record(unique, counts[first])

        def pulled(ids, **kw):
            with self.lock:
                rows = pull(ids, **kw)
                new = ids[[i not in self.history for i in ids.tolist()]]
                record(new, np.zeros(len(new), np.int64))
                return rows
        table.push, table.pull = pushed, pulled

    def lag(self, i: int, row: np.ndarray, own: list[np.ndarray]) -> tuple[int, int]:
        """(updates the row's server applied since the version ``row`` was fetched as, training
        steps that version has taken in); ``own``: the gradients SGD moved it by since, in order."""
        with self.lock:
            versions = self.history[i]
            for v in range(len(versions) - 1, -1, -1):
                moved = np.frombuffer(versions[v], np.float32)
                for g in own:
                    moved = moved - LR * g
                if np.allclose(moved, row, rtol=0, atol=1e-6):
                    return len(versions) - 1 - v, self.steps_in[i][v]
            raise AssertionError(f"id {i}: read a value no version of the row, moved by {len(own)} own "
                                 "gradients, gives")


def train(workers: int, s: int | None, steps: int = 40, ids_space: int = 30, seed: int = 0,
          capacity: int = 1 << 16, check=None, prefetch: bool = False, device: str = "cpu", hold: int = 0):
    """``workers`` threads, one CachedSource each (None: no cache), sync, combined steps; returns
    (the servers' rows of every id, the sources). ``prefetch``: async as the trainer runs it with
    staleness 1 (the next step's pull is sent before this step's push)."""
    client = connect(CONFIG, 2)
    versions = Versions(client) if check else None
    sources = []
    for w in range(workers):
        src = PSSource(client, 4, 20, worker=w, workers=workers, combine=True)
        sources.append(src if s is None else CachedSource(src, {"a": DIM}, capacity, s, CONFIG.optimizer, hold,
                                                          device=device))
    errors = []
    handed = np.zeros((workers, ids_space), np.int64)  # gradients each worker gave its source, per id
    own = [{} for _ in range(workers)]  # per worker: id -> its gradients given since the cache fetched the row

    def run(w: int):
        try:
            rng = np.random.default_rng(seed + w)
            src = sources[w]
            batches = [np.unique(rng.integers(0, ids_space, 12)).astype(np.int64) for _ in range(steps + 1)]
            ahead = None
            for step in range(1, steps + 1):
                ids = batches[step]
                if ahead is None:
                    src.settle(None if not prefetch else step - 2)
                    ahead, moved_by = src.pull("a", ids, create=True, step=step), {k: list(v) for k, v in own[w].items()}
                rows = ahead.wait()
                rows = rows.cpu().numpy() if isinstance(rows, torch.Tensor) else rows
                if s is not None:  # hits were copied at the pull, with what had moved them by then; misses are fetched
                    hit = src._last_hit["a"]
                    moved_by = {i: moved_by.get(i, []) if h else [] for i, h in zip(ids.tolist(), hit)}
                    own[w].update({i: [] for i in ids[~hit].tolist()})
                if check:
                    check(versions, src, ids, rows, handed[w], moved_by)
                ahead = None
                if prefetch and step < steps:
                    src.settle(step - 1)
                    ahead = src.pull("a", batches[step + 1], create=True, step=step + 1)
                    moved_by = {k: list(v) for k, v in own[w].items()}
                grads = rng.normal(size=(len(ids), DIM)).astype(np.float32)
                src.push("a", ids, grads, step=step)
                handed[w][ids] += 1
                for i, g in zip(ids.tolist(), grads):
                    own[w].setdefault(i, []).append(g)
                if s is not None:
                    assert src.slots["a"].count.max() <= hold  # (b): at most h unpushed updates of a row
            src.flush(steps)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
    threads = [threading.Thread(target=run, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    if errors:
        raise errors[0]
    return client.pull("a", np.arange(ids_space, dtype=np.int64), create=False).wait(), sources


@pytest.mark.parametrize("held", [False, True], ids=["hold 0", "hold s"])
@pytest.mark.parametrize("workers,prefetch", [(1, False), (2, False), (1, True)])
@pytest.mark.parametrize("s", [1, 2, 4])
def test_every_read_is_at_most_s_updates_behind_its_server(workers, prefetch, s, held):
    lags, step_lags, followed = [], [], []

    def check(versions, src, ids, rows, handed, moved_by):
        for i, row in zip(ids.tolist(), rows):
            lag, taken = versions.lag(i, row, moved_by[i])
            lags.append(lag)
            followed.append(len(moved_by[i]))
            bound = s + prefetch  # async: the collection's own bound (1) adds to the cache's
            assert lag <= bound, f"id {i} read {lag} updates behind its server, over {bound}"
            if workers == 1:  # the cache counts steps, not updates: the row lacks at most s of this worker's steps
                step_lags.append(handed[i] - taken)
                assert handed[i] - taken <= bound, f"id {i} read {handed[i] - taken} steps behind, over {bound}"
    plain, _ = train(workers, None)
    final, sources = train(workers, s, check=check, prefetch=prefetch, hold=s if held else 0)
    np.testing.assert_allclose(final, plain, rtol=1e-5, atol=1e-6)  # every gradient reached the servers
    assert sources[0].metrics()["cache_a_hit_rate_unique"] > 0
    if s > 1:  # rows were served behind: the check checked something
        assert max(step_lags if workers == 1 else lags) >= 1
    assert max(followed) >= 1  # and rows were read moved by own gradients
    assert all(src.slots["a"].count.max() == 0 and len(src.slots["a"]) == 0 for src in sources)  # flush dropped all


@pytest.mark.parametrize("workers", [1, 2])
def test_staleness_zero_is_bitwise_equal_to_no_cache(workers):
    plain, _ = train(workers, None)
    cached, sources = train(workers, 0)
    np.testing.assert_array_equal(cached, plain)
    assert sources[0].metrics()["cache_a_hit_rate_unique"] == 0.0


def test_a_larger_bound_serves_more_hits_and_flush_pushes_every_pending_gradient():
    _, loose = train(1, 4)
    _, tight = train(1, 1)
    assert loose[0].metrics()["cache_a_hit_rate_unique"] > tight[0].metrics()["cache_a_hit_rate_unique"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: the cache's rows on a GPU are checked "
                    "on a machine with one")
def test_a_cache_on_the_gpu_keeps_the_contract_and_returns_device_rows():
    plain, _ = train(2, None)
    final, sources = train(2, 2, device="cuda", hold=2)
    np.testing.assert_allclose(final, plain, rtol=1e-5, atol=1e-6)
    assert sources[0].slots["a"].rows.is_cuda and sources[0].metrics()["cache_a_hit_rate_unique"] > 0
    bitwise, _ = train(1, 0, device="cuda")
    np.testing.assert_array_equal(bitwise, train(1, None)[0])
