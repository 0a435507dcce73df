"""Following a training run: each newer committed checkpoint becomes the next served model.

    follower = Follower(RUN_DIR)
    new = follower.next_model(current)    # None while the run has nothing newer than current.step

A reload is two halves. ``prepare`` reads and decodes, from plain data about the served model
(``Served``) to plain data (``Prepared``: tables built in the served form, dense weights as numpy),
so it can run in another process (``follow_process.py``: the serving process's interpreter lock
and cores stay with requests). ``Prepared.apply`` makes the model from the served one: what is
left in the serving process is a merge into the small overlay, off the interpreter lock (none when
the child holds the served tables and merged them, ``Prepared.merged``), and one onnxruntime session.

The newest checkpoint's whole chain is verified first (``checkpoint/chain.py``: each link of the
run and the very commit its delta was saved on, steps their directories', no loop, no longer
than checkpoint.full_every allows): a chain that fails is a failed reload, and the old model stays.
A delta chain that passes through the very checkpoint served (its directory, and the digest of
its commit when it was loaded: a base swapped on disk since is not it) is applied as it is:
only the rows (new and changed) and deleted ids of the links after it, beside the served tables
(``overlay.py``), in their form; the dense weights are swapped into the same ONNX graph
(``DenseRunner.reweighted``). Anything else (a new full checkpoint, a chain from elsewhere, an
export from before digests) is read whole, as ``cardinal export`` reads it. Nothing is changed in
place: the server swaps the reference, and the old model's memory goes once its last request is
answered, so memory stays flat across reloads. ``stop`` (set on SIGTERM) ends a reload between links.
"""

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cardinal.checkpoint.layout import committed, latest
from cardinal.checkpoint.reader import Reader
from cardinal.serve.export import close_all, load_store, load_stores, run_recipe, table_rows
from cardinal.serve.model import ServingModel
from cardinal.serve.overlay import beside
from cardinal.serve.tables import SnapshotTable


_NO_IDS = np.empty(0, np.int64)


@dataclass(frozen=True)
class Served:
    """What preparing a reload needs of the served model: its checkpoint, commit digest, step and
    tables' forms."""
    checkpoint: str
    commit_sha256: str | None
    step: int
    forms: dict[str, str]

    @staticmethod
    def of(model: ServingModel) -> "Served":
        m = model.manifest
        return Served(m["checkpoint"], m.get("commit_sha256"), model.step, {n: t.form for n, t in model.tables.items()})


@dataclass(frozen=True)
class Prepared:
    """A newer checkpoint read, not yet applied: ``tables`` per table a ``SnapshotTable`` of every
    row (``whole``), else (a ``SnapshotTable`` of the rows new and changed since the served
    checkpoint, the ids deleted since), or, ``merged`` (by a process that holds the served tables,
    ``follow_process.py``), per table changed what the server is to serve: a ``SnapshotTable``, or
    (recent rows, gone ids, rows read) beside the served base (``overlay.beside``)."""
    step: int
    source: dict                    # the checkpoint's "checkpoint", "run" and "commit_sha256"
    dense: dict[str, np.ndarray]    # the dense model's state dict
    tables: dict
    whole: bool
    merged: bool = False

    def apply(self, current: ServingModel) -> ServingModel:
        if self.whole or self.merged:
            tables = {**current.tables, **{name: t if isinstance(t, SnapshotTable) else beside(current.tables[name], *t)
                                           for name, t in self.tables.items()}}
            runner = current.runner.reweighted(self.dense)
            return ServingModel({**current.manifest, **self.source, "step": self.step}, tables, runner, self.step)
        return current.updated(self.step, self.source, self.dense, self.tables)

    def served(self, before: Served) -> Served:
        """What ``Served.of`` says of the model ``apply`` makes from a model ``before`` says it of."""
        return Served(self.source["checkpoint"], self.source.get("commit_sha256"), self.step, before.forms)


class Follower:
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / "checkpoints"
        self.recipe = run_recipe(self.run_dir)
        self.stop = threading.Event()

    def warm(self, current: ServingModel) -> None:
        """Read the served checkpoint once and apply an empty delta, both thrown away: the compiled
        kernels a reload runs are loaded before the first request, not while a reload holds requests up."""
        self.warm_prepare(Served.of(current))
        warm_apply(current)

    def warm_prepare(self, served: Served) -> None:
        path = Path(served.checkpoint)
        if committed(path):
            self._whole(Reader(path), served)

    def newest(self) -> Path | None:
        return latest(self.root)

    def next_model(self, current: ServingModel) -> ServingModel | None:
        prepared = self.prepare(Served.of(current))
        return None if prepared is None else prepared.apply(current)

    def prepare(self, served: Served) -> Prepared | None:
        """The run's newest checkpoint after ``served``, read and decoded; None when there is none."""
        if "saec" in served.forms.values():
            raise ValueError("a saec export cannot follow training (its clusters are fixed at export)")
        found = self.newest()
        if found is None:
            return None
        head = Reader(found)
        if head.step <= served.step:
            return None
        chain = head.chain  # every link verified before anything is read
        links = self._deltas_since(chain, served)
        if not links:
            return self._whole(head, served)
        rows = {}
        for link in links:
            if self.stop.is_set():
                return None
            rows = _merge(rows, self._delta_rows(link, served))
        tables = {name: (SnapshotTable.build(ids, values, served.forms[name]), deleted)
                  for name, (ids, values, deleted) in rows.items()}
        return Prepared(head.step, _source(head), _dense(head), tables, whole=False)

    @staticmethod
    def _deltas_since(chain: list[Reader], served: Served) -> list[Reader]:
        """The links of ``chain`` after the served checkpoint, oldest first; empty when the chain does
        not pass through it (the same directory, and the commit digest the served model records)."""
        at = Path(served.checkpoint).resolve()
        for k, link in enumerate(chain[:-1]):
            if served.commit_sha256 is not None and link.sha256 == served.commit_sha256 and link.path.resolve() == at:
                return chain[k + 1:]
        return []

    def _delta_rows(self, link: Reader, served: Served) -> dict:
        """{table: (ids, float32 values, deleted ids)} of one delta, every shard's, decoded as a pull
        reads them (``cold_values``: a row's values from its saved words, no table built to hold them)."""
        store = load_store(self.recipe)
        try:
            link.check_compatible(store.tables)
            out = {}
            for name in served.forms:
                t = store.tables[name]
                blocks = [block for _, block in link.row_chunks(store.plan, 0, t)]
                ids = np.concatenate([_NO_IDS, *(b.ids for b in blocks)])
                values = np.concatenate([np.empty((0, t.dim), np.float32), *(t.cold_values(b.data) for b in blocks)])
                out[name] = (ids, values, link.deleted_ids(store.plan, 0, name))
            return out
        finally:
            store.close()

    def _whole(self, found: Reader, served: Served) -> Prepared:
        stores = load_stores(self.recipe, found)
        try:
            tables = {name: SnapshotTable.build(*table_rows(stores, name), form) for name, form in served.forms.items()}
        finally:
            close_all(stores)
        return Prepared(found.step, _source(found), _dense(found), tables, whole=True)


def warm_apply(current: ServingModel) -> None:
    """An empty delta applied to ``current`` and its graph reweighted with no weights, the result
    thrown away (``Follower.warm``): onnx is imported now (~90 ms under the interpreter lock), not at
    the first reload."""
    empty = {name: (SnapshotTable.build(_NO_IDS, np.empty((0, t.width), np.float32), t.form), _NO_IDS)
             for name, t in current.tables.items()}
    Prepared(current.step, {}, {}, empty, whole=False).apply(current)


def _source(saved: Reader) -> dict:
    return {"checkpoint": str(saved.path), **saved.identity}


def _dense(saved: Reader) -> dict[str, np.ndarray]:
    """The checkpoint's dense weights as numpy arrays: what ``DenseRunner.reweighted`` takes, and
    what a process without torch's tensors in its hands can be sent."""
    return {k: v.detach().cpu().numpy() for k, v in saved.dense_state()["model"].items()}


def _merge(older: dict, newer: dict) -> dict:
    """Two deltas' rows as one: the newer's rows win, ids either deleted stay deleted unless set again."""
    out = dict(newer)
    for name, (ids, values, deleted) in older.items():
        if name not in newer:
            out[name] = (ids, values, deleted)
            continue
        n_ids, n_values, n_deleted = newer[name]
        keep = ~np.isin(ids, np.concatenate([n_ids, n_deleted]))
        gone = np.setdiff1d(np.concatenate([deleted, n_deleted]), n_ids)
        out[name] = (np.concatenate([ids[keep], n_ids]), np.concatenate([values[keep], n_values]), gone)
    return out
