"""How a client reads a table's rows: from the rows' own servers (``PlainReader``), or, where
the plan copies the table's hottest ids to every server (``sharding/plan.py``, ``Replicas``), hot
ids from the copies this worker reads (``CopyReader``). The client takes one of the two when it
is made, by its plan, so that its pull never asks which.

A training pull of a table with copies refreshes them first when this client is their refresher
and its last refresh is ``staleness`` steps old, and reads hot ids from copies; a copy older
than its bound answers nothing (``ps/server/replicas.py``), and those ids are read from their
own servers. Copies go by the pulls' steps: a client that pulls every step as step 0 refreshes
them once. Every worker of the job counts the same traffic fields (a collective sums them):
``copied_ids``, ``copied_stale_ids`` and ``copy_refresh_ids`` (``traffic.py``).
"""

import threading
from dataclasses import replace

import numpy as np

from cardinal.ps import validate
from cardinal.ps.client.parts import Part, by_shard, parts_of
from cardinal.ps.transport.requests import PullRequest, PushRequest


class Reading:
    """One pull's parts (``parts.py``) and the rows their answers give: the answers as they came."""

    def __init__(self, parts: list[Part]):
        self.parts = parts

    def rows(self, results: list[np.ndarray]) -> list[np.ndarray]:
        return results


class PlainReader:
    """Every row from its own servers."""

    def __init__(self, client):
        self.client = client

    def read(self, table: str, ids: np.ndarray, *, create: bool, step: int) -> Reading:
        return Reading(parts_of(self.client.plan, table, ids))

    def forget(self) -> None:
        """The servers' copies are gone (a checkpoint was loaded): nothing to forget here."""


class CopyReader(PlainReader):
    """Hot rows from the copies ``worker`` of ``workers`` reads (``ShardingPlan.read_route``); it
    refreshes the copies of every ``workers``-th table with copies, from its ``worker``-th."""

    def __init__(self, client, worker: int, workers: int):
        super().__init__(client)
        plan = client.plan
        self.worker = worker
        self.refreshes = {t for i, t in enumerate(sorted(plan.replicas)) if i % workers == worker}
        self.readers = {t: sorted({plan.reader(t, w) for w in range(workers)}) for t in self.refreshes}
        self.refreshed: dict[str, int] = {}  # table -> step of this client's last refresh of its copies
        self.refreshing = threading.Lock()
        client.traffic.add(copied_ids=0, copied_stale_ids=0, copy_refresh_ids=0)

    def read(self, table: str, ids: np.ndarray, *, create: bool, step: int) -> Reading:
        plan = self.client.plan
        if not create or table not in plan.replicas:  # evaluation reads the rows themselves
            return super().read(table, ids, create=create, step=step)
        if table in self.refreshes:
            validate.check_step(step)  # checked before a refresh: a refused pull changes nothing
            self.refresh(table, step)
        shards, copied = plan.read_route(table, ids, self.worker)
        if copied is None:
            return super().read(table, ids, create=create, step=step)
        parts = []
        for name, mask in ((table, ~copied), (plan.replica_name(table), copied)):
            pos = np.flatnonzero(mask)
            parts += by_shard(name, shards[pos], pos, plan.n_shards)
        return CopyReading(self, table, ids, step, parts)

    def own_rows(self, table: str, ids: np.ndarray, step: int) -> np.ndarray:
        """A training pull of a table of one piece from the rows' own servers, waited on."""
        client = self.client
        parts = parts_of(client.plan, table, ids)
        request = PullRequest(table, ids, create=True, step=step, codec=client.pull_codec.name)
        results = [h.wait() for h in [client._pull(s, request.part(name, pos, client._request_id()))
                                      for name, _, s, pos in parts]]
        out = np.empty((len(ids), results[0].shape[1]), np.float32)
        for (_, _, _, pos), rows in zip(parts, results):
            out[pos] = rows
        validate.check_decoded(out, client.pull_codec, table)
        return out

    def refresh(self, table: str, step: int) -> None:
        """Copy ``table``'s hot rows, read at ``step`` from their own servers, to each server a worker
        reads copies from, if the last copy is ``staleness`` steps old (or of a later step: the run
        went back)."""
        client, spec = self.client, self.client.plan.replicas[table]
        with self.refreshing:
            last = self.refreshed.get(table)
            if last is not None and 0 <= step - last < spec.staleness:
                return
            own = client.plan.route(table, spec.array)
            readers = [s for s in self.readers[table] if (own != s).any()]  # servers some worker reads copies from
            rows = self.own_rows(table, spec.array, step) if readers else None
            copies = PushRequest(client.plan.replica_name(table), spec.array, rows, step, kind="replica",
                                 codec=client.pull_codec.name)
            handles = [client._push(s, replace(copies, request_id=client._request_id())) for s in readers]
            for h in handles:
                h.wait()
            self.refreshed[table] = step
            client.traffic.add(copy_refresh_ids=len(spec.ids) * len(readers))

    def forget(self) -> None:
        """Every server forgot its copies (a checkpoint was loaded): the next pull refreshes them."""
        with self.refreshing:
            self.refreshed.clear()


class CopyReading(Reading):
    """A pull that read hot ids from copies: those past their bound are read again from their own
    servers, once however often the pull is waited on, and the ids read each way counted once."""

    def __init__(self, reader: CopyReader, table: str, ids: np.ndarray, step: int, parts: list[Part]):
        super().__init__(parts)
        self.reader, self.table, self.ids, self.step = reader, table, ids, step
        self.copied = [i for i, p in enumerate(parts) if p.name != table]
        self.again: dict[int, np.ndarray] = {}  # part -> its rows from their own servers
        self.counted = False

    def rows(self, results: list[np.ndarray]) -> list[np.ndarray]:
        for i in self.copied:
            pos = self.parts[i].pos
            if len(results[i]) != len(pos) and i not in self.again:  # past the bound: from their own servers
                self.again[i] = self.reader.own_rows(self.table, self.ids[pos], self.step)
        if not self.counted:
            self.reader.client.traffic.add(
                copied_ids=sum(len(self.parts[i].pos) for i in self.copied if i not in self.again),
                copied_stale_ids=sum(len(self.parts[i].pos) for i in self.again))
            self.counted = True
        return [self.again.get(i, rows) for i, rows in enumerate(results)]
