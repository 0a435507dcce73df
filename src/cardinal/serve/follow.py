"""Following a training run: each newer committed checkpoint becomes the next served model.

    follower = Follower(RUN_DIR)
    new = follower.next_model(current)    # None while the run has nothing newer than current.step

A delta checkpoint whose chain passes through the very checkpoint served is applied as it is:
only its rows (new and changed) and its deleted ids, over copies of the served tables, in their
form (the chain is walked back only as far as the served checkpoint: a reload reads its new
links); the dense weights are swapped into the same ONNX graph (``DenseRunner.reweighted``). Anything
else (a new full checkpoint, a chain from elsewhere) is read whole, as ``cardinal export``
reads it. Nothing is changed in place: the server swaps the reference, and the old model's
memory goes once its last request is answered, so memory stays flat across reloads.
"""

from pathlib import Path

import numpy as np

from cardinal.ps import checkpoint
from cardinal.ps.checkpoint_load import check_compatible, deleted_ids, read_commit, table_chunks
from cardinal.serve.export import close_all, dense_state, load_store, load_stores, lookup, run_recipe, table_rows
from cardinal.serve.model import ServingModel
from cardinal.serve.tables import SnapshotTable


class Follower:
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / "checkpoints"
        self.recipe = run_recipe(self.run_dir)

    def warm(self, current: ServingModel) -> None:
        """Read the served checkpoint once, thrown away: the compiled kernels a reload runs are loaded
        before the first request, not while a reload holds requests up."""
        path = Path(current.manifest["checkpoint"])
        if (path / checkpoint.COMMIT).is_file():
            self._whole(path, current, current.step)

    def newest(self) -> Path | None:
        return checkpoint.latest(self.root)

    def next_model(self, current: ServingModel) -> ServingModel | None:
        found = self.newest()
        if found is None:
            return None
        info = read_commit(found)
        step = info["step"]
        if step <= current.step:
            return None
        links = self._deltas_since(found, info, current)
        if links:  # deltas on the very checkpoint served: apply their rows only
            rows = {}
            for path, info in links:
                rows = _merge(rows, self._delta_rows(path, info, current))
            return current.updated(step, str(found), dense_state(found), rows)
        return self._whole(found, current, step)

    def _deltas_since(self, found: Path, info: dict, current: ServingModel) -> list[tuple[Path, dict]]:
        """The deltas from the served checkpoint to ``found``, oldest first, each ``read_commit``-checked;
        empty when ``found`` is no delta chain through it. Walks back only as far as the served one:
        a reload reads its new links, not the whole chain, however long ``train.full_every`` makes it."""
        served = Path(current.manifest["checkpoint"]).resolve()
        links, path = [], found
        while True:
            if info["step"] <= current.step:
                return []
            links.append((path, info))
            base = info.get("base")
            if base is None:
                return []
            path = checkpoint.step_dir(path.parent, base)
            if path.resolve() == served:
                return links[::-1]
            info = read_commit(path)

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

    def _whole(self, found: Path, current: ServingModel, step: int) -> ServingModel:
        stores = load_stores(self.recipe, found)
        try:
            tables = {}
            for name, old in current.tables.items():
                if old.form == "saec":
                    raise ValueError("a saec export cannot follow training (its clusters are fixed at export)")
                tables[name] = SnapshotTable.build(*table_rows(stores, name), old.form)
        finally:
            close_all(stores)
        runner = current.runner.reweighted(dense_state(found))
        return ServingModel({**current.manifest, "step": step, "checkpoint": str(found)}, tables, runner, step)


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
