"""Following a training run: each newer committed checkpoint becomes the next served model.

    follower = Follower(RUN_DIR)
    new = follower.next_model(current)    # None while the run has nothing newer than current.step

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
from pathlib import Path

import numpy as np

from cardinal.checkpoint.layout import committed, latest
from cardinal.checkpoint.reader import Reader
from cardinal.serve.export import close_all, load_store, load_stores, run_recipe, table_rows
from cardinal.serve.model import ServingModel
from cardinal.serve.tables import SnapshotTable


_NO_IDS = np.empty(0, np.int64)


class Follower:
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / "checkpoints"
        self.recipe = run_recipe(self.run_dir)
        self.stop = threading.Event()

    def warm(self, current: ServingModel) -> None:
        """Read the served checkpoint once, thrown away: the compiled kernels a reload runs are loaded
        before the first request, not while a reload holds requests up."""
        path = Path(current.manifest["checkpoint"])
        if committed(path):
            self._whole(Reader(path), current)

    def newest(self) -> Path | None:
        return latest(self.root)

    def next_model(self, current: ServingModel) -> ServingModel | None:
        found = self.newest()
        if found is None:
            return None
        head = Reader(found)
        if head.step <= current.step:
            return None
        chain = head.chain  # every link verified before anything is read
        links = self._deltas_since(chain, current)
        if not links:
            return self._whole(head, current)
        rows = {}
        for link in links:
            if self.stop.is_set():
                return None
            rows = _merge(rows, self._delta_rows(link, current))
        return current.updated(head.step, _source(head), head.dense_state()["model"], rows)

    @staticmethod
    def _deltas_since(chain: list[Reader], current: ServingModel) -> list[Reader]:
        """The links of ``chain`` after the served checkpoint, oldest first; empty when the chain does
        not pass through it (the same directory, and the commit digest the served model records)."""
        served = Path(current.manifest["checkpoint"]).resolve()
        sha = current.manifest.get("commit_sha256")
        for k, link in enumerate(chain[:-1]):
            if sha is not None and link.sha256 == sha and link.path.resolve() == served:
                return chain[k + 1:]
        return []

    def _delta_rows(self, link: Reader, current: ServingModel) -> dict:
        """{table: (ids, float32 values, deleted ids)} of one delta, every shard's, decoded as a pull
        reads them (``cold_values``: a row's values from its saved words, no table built to hold them)."""
        store = load_store(self.recipe)
        try:
            link.check_compatible(store.tables)
            out = {}
            for name in current.tables:
                t = store.tables[name]
                blocks = [block for _, block in link.row_chunks(store.plan, 0, t)]
                ids = np.concatenate([_NO_IDS, *(b.ids for b in blocks)])
                values = np.concatenate([np.empty((0, t.dim), np.float32), *(t.cold_values(b.data) for b in blocks)])
                out[name] = (ids, values, link.deleted_ids(store.plan, 0, name))
            return out
        finally:
            store.close()

    def _whole(self, found: Reader, current: ServingModel) -> ServingModel:
        stores = load_stores(self.recipe, found)
        try:
            tables = {}
            for name, old in current.tables.items():
                if old.form == "saec":
                    raise ValueError("a saec export cannot follow training (its clusters are fixed at export)")
                tables[name] = SnapshotTable.build(*table_rows(stores, name), old.form)
        finally:
            close_all(stores)
        runner = current.runner.reweighted(found.dense_state()["model"])
        return ServingModel({**current.manifest, **_source(found), "step": found.step}, tables, runner, found.step)


def _source(saved: Reader) -> dict:
    return {"checkpoint": str(saved.path), **saved.identity}


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
