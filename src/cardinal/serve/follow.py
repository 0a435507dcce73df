"""Following a training run: each newer committed checkpoint becomes the next served model.

    follower = Follower(RUN_DIR)
    new = follower.next_model(current)    # None while the run has nothing newer than current.step

The newest checkpoint's whole chain is verified first (``checkpoint_chain.py``: each link of the
run and the very commit its delta was saved on, steps their directories', no loop, no longer
than train.full_every allows): a chain that fails is a failed reload, and the old model stays.
A delta chain that passes through the very checkpoint served (its directory, and the digest of
its commit when it was loaded: a base swapped on disk since is not it) is applied as it is:
only the rows (new and changed) and deleted ids of the links after it, over copies of the served
tables, in their form; the dense weights are swapped into the same ONNX graph
(``DenseRunner.reweighted``). Anything else (a new full checkpoint, a chain from elsewhere, an
export from before digests) is read whole, as ``cardinal export`` reads it. Nothing is changed in
place: the server swaps the reference, and the old model's memory goes once its last request is
answered, so memory stays flat across reloads. ``stop`` (set on SIGTERM) ends a reload between links.
"""

import threading
from pathlib import Path

import numpy as np

from cardinal.ps import checkpoint
from cardinal.ps.checkpoint_chain import identity
from cardinal.ps.checkpoint_load import check_compatible, deleted_ids, read_chain, read_commit, table_chunks
from cardinal.serve.export import close_all, dense_state, load_store, load_stores, lookup, run_recipe, table_rows
from cardinal.serve.model import ServingModel
from cardinal.serve.tables import SnapshotTable


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
        if (path / checkpoint.COMMIT).is_file():
            self._whole(path, read_commit(path), current)

    def newest(self) -> Path | None:
        return checkpoint.latest(self.root)

    def next_model(self, current: ServingModel) -> ServingModel | None:
        found = self.newest()
        if found is None or read_commit(found)["step"] <= current.step:
            return None
        chain = read_chain(found)  # every link verified before anything is read
        info = chain[-1][1]
        links = self._deltas_since(chain, current)
        if not links:
            return self._whole(found, info, current)
        rows = {}
        for path, link in links:
            if self.stop.is_set():
                return None
            rows = _merge(rows, self._delta_rows(path, link, current))
        return current.updated(info["step"], _source(found, info), dense_state(found, info), rows)

    @staticmethod
    def _deltas_since(chain: list[tuple[Path, dict]], current: ServingModel) -> list[tuple[Path, dict]]:
        """The links of ``chain`` after the served checkpoint, oldest first; empty when the chain does
        not pass through it (the same directory, and the commit digest the served model records)."""
        served = Path(current.manifest["checkpoint"]).resolve()
        sha = current.manifest.get("commit_sha256")
        for k, (path, info) in enumerate(chain[:-1]):
            if sha is not None and info["sha256"] == sha and path.resolve() == served:
                return chain[k + 1:]
        return []

    def _delta_rows(self, path: Path, info: dict, current: ServingModel) -> dict:
        """{table: (ids, float32 values, deleted ids)} of one delta, every shard's, decoded."""
        store = load_store(self.recipe)
        try:
            check_compatible(path, info, store.tables)
            out = {}
            for name in current.tables:
                t = store.tables[name]
                for _, block in table_chunks(path, info, store.plan, 0, t):
                    t.import_rows(*block)
                ids = t.export()["ids"]
                out[name] = (ids, lookup(t, ids), deleted_ids(path, info, store.plan, 0, name))
            return out
        finally:
            store.close()

    def _whole(self, found: Path, info: dict, current: ServingModel) -> ServingModel:
        stores = load_stores(self.recipe, found)
        try:
            tables = {}
            for name, old in current.tables.items():
                if old.form == "saec":
                    raise ValueError("a saec export cannot follow training (its clusters are fixed at export)")
                tables[name] = SnapshotTable.build(*table_rows(stores, name), old.form)
        finally:
            close_all(stores)
        runner = current.runner.reweighted(dense_state(found, info))
        return ServingModel({**current.manifest, **_source(found, info), "step": info["step"]}, tables, runner,
                            info["step"])


def _source(path: Path, info: dict) -> dict:
    return {"checkpoint": str(path), **identity(info)}


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
