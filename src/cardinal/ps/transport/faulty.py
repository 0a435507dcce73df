"""A transport that misbehaves on purpose, wrapped around another: for chaos tests.

Each request, independently (seeded):
  - dropped (``drop``): never delivered; waiting on it raises a TransientError;
  - reply lost (``lose_reply``): delivered and applied, but waiting raises a TransientError;
  - duplicated (``duplicate``): delivered twice;
and every delivery is delayed by up to ``max_delay_s`` on its own thread, so requests in
flight together arrive in any order. Correct clients resend with the same request id and
stores apply each id once, so in sync mode training must end bitwise where it does without
faults.
"""

import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from cardinal.ps.transport.base import DEFAULT_TIMEOUT, FutureHandle, Handle, TransientError, Transport


class _Lost(Handle):
    def __init__(self, delivered: Future | None, what: str):
        self.delivered, self.what = delivered, what

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT):
        if self.delivered is not None:
            self.delivered.result(timeout)  # applied; only the reply is lost
        raise TransientError(f"{self.what}: lost (fault injected)")


class FaultyTransport(Transport):
    def __init__(self, inner: Transport, seed: int = 0, drop: float = 0.1, lose_reply: float = 0.1,
                 duplicate: float = 0.1, max_delay_s: float = 0.003):
        self.inner, self.n_shards = inner, inner.n_shards
        self.drop, self.lose_reply, self.duplicate, self.max_delay_s = drop, lose_reply, duplicate, max_delay_s
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="cardinal-faulty")
        self.injected = {"drop": 0, "lose_reply": 0, "duplicate": 0}

    def _deliver(self, call) -> Future:
        with self._lock:
            delay = self._rng.uniform(0, self.max_delay_s)

        def later():
            time.sleep(delay)
            return call().wait()
        return self._pool.submit(later)

    def _faulty(self, what: str, call) -> Handle:
        with self._lock:
            r, twice = self._rng.random(), self._rng.random() < self.duplicate
        if r < self.drop:
            self.injected["drop"] += 1
            return _Lost(None, what)
        delivered = self._deliver(call)
        if twice:
            self.injected["duplicate"] += 1
            self._deliver(call)
        if r < self.drop + self.lose_reply:
            self.injected["lose_reply"] += 1
            return _Lost(delivered, what)
        return FutureHandle(delivered, what)

    def pull(self, shard, request):
        return self._faulty(f"pull from shard {shard}", lambda: self.inner.pull(shard, request))

    def push(self, shard, request):
        return self._faulty(f"push to shard {shard}", lambda: self.inner.push(shard, request))

    def save(self, shard, root, step, base=None, *, keep=None, dry=False):
        return self.inner.save(shard, root, step, base, keep=keep, dry=dry)

    def load(self, shard, step_path, phase="load", token=None, *, markers=None, part=None):
        return self.inner.load(shard, step_path, phase, token, markers=markers, part=part)

    def read_part(self, shard, step_path, commit, need, to):
        return self.inner.read_part(shard, step_path, commit, need, to)

    def where(self, shard):
        return self.inner.where(shard)

    def stats(self, shard, digest=False, check=False):
        return self.inner.stats(shard, digest, check)

    def finish(self, shard, step):
        return self.inner.finish(shard, step)

    def health(self, shard):
        return self.inner.health(shard)

    def close(self):
        self._pool.shutdown(wait=True)
        self.inner.close()
