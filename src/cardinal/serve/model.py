"""``ServingModel``: an export loaded for predictions: its tables, its ONNX graph, its input layout.

    model = ServingModel.load(DIR)              # every file checked against manifest.json first
    p = model.predict(batch)                    # a data.Batch, as the readers make -> (B,) float32
    model.lookups, model.unknown                # ids looked up and ids never trained, since load

The embedding path is training's own: an ``EmbeddingCollection`` in eval mode over a
``SnapshotSource`` (a ``RowSource`` whose pulls read the snapshot tables), so ids are
de-duplicated, folded (``hash_buckets``) and pooled as in ``cardinal eval``, and an id never
trained reads zeros there as here. A model is never changed once built: a reload builds
another (``updated``) and the server swaps one reference, so a request sees one or the other.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cardinal.checkpoint.durable import read_json, verify_file
from cardinal.ps.transport.base import Completed
from cardinal.serve.export import KIND, MANIFEST
from cardinal.serve.onnx_model import DenseRunner
from cardinal.serve.overlay import overlaid
from cardinal.serve.tables import SnapshotTable
from cardinal.worker.collection import EmbeddingCollection
from cardinal.worker.sources import RowSource


class SnapshotSource(RowSource):
    """Pulls answered from snapshot tables; counts lookups and ids never trained."""

    def __init__(self, tables: dict[str, SnapshotTable]):
        self.tables = tables
        self.lookups = self.unknown = 0

    def pull(self, table, ids, *, create, step):
        rows, known = self.tables[table].lookup(ids)
        self.lookups += len(ids)
        self.unknown += len(ids) - int(known.sum())
        return Completed(rows)

    def push(self, table, ids, grads, *, step, counts=None):
        raise RuntimeError("a served model is not trained")

    def settle(self, up_to_step):
        pass

    def flush(self, step):
        pass


@dataclass(frozen=True, eq=False)
class ServingModel:
    manifest: dict
    tables: dict[str, SnapshotTable]
    runner: DenseRunner
    step: int

    def __post_init__(self):
        m = self.manifest
        source = SnapshotSource(self.tables)
        embedding = EmbeddingCollection(source, dict(m["features"]), m["pooling"], staleness=None,
                                        buckets=m["hash_buckets"]).eval()
        object.__setattr__(self, "_source", source)
        object.__setattr__(self, "_embedding", embedding)

    @staticmethod
    def load(where: str | Path, threads: int = 1) -> "ServingModel":
        where = Path(where)
        path = where / MANIFEST
        if not path.is_file():
            raise ValueError(f"{where} is not an export: no {MANIFEST} (write one with `cardinal export RUN --out DIR`)")
        m = read_json(path)
        if m.get("kind") != KIND or m.get("version") != 1:
            raise ValueError(f"{path}: not a version-1 {KIND} manifest")
        files = m["files"]
        verify_file(where / "model.onnx", files.get("model.onnx"))
        tables = {}
        for name, info in m["tables"].items():
            entries = {k.removeprefix("tables/"): v for k, v in files.items() if k.startswith(f"tables/{name}.")}
            tables[name] = SnapshotTable.load(where / "tables", name, info["form"], info["width"], entries)
        return ServingModel(m, tables, DenseRunner((where / "model.onnx").read_bytes(), threads), m["step"])

    @property
    def lookups(self) -> int:
        return self._source.lookups

    @property
    def unknown(self) -> int:
        return self._source.unknown

    def predict(self, batch) -> np.ndarray:
        """(B,) float32 click probabilities of ``batch`` (not thread-safe: one caller at a time)."""
        m = self.manifest
        if "dims" in m:  # tables of their own dims: the graph projects the fields' values, side by side
            with torch.no_grad():
                emb, wide = self._embedding.split(batch.sparse, m["dims"], m["uses_wide"])
            feed = {"dense": batch.dense.numpy(), "emb": emb.numpy()}
            if wide is not None:
                feed["wide"] = wide.numpy()
            return self.runner.predict(feed)
        with torch.no_grad():
            rows = self._embedding.stacked(batch.sparse).numpy()  # (B, fields, dim [+ 1])
        dim = m["dim"] if m["uses_embedding"] else 0
        feed = {"dense": batch.dense.numpy(), "emb": np.ascontiguousarray(rows[..., :dim])}
        if m["uses_wide"]:
            feed["wide"] = np.ascontiguousarray(rows[..., dim])
        return self.runner.predict(feed)

    def updated(self, step: int, source: dict, dense_state: dict | None, rows: dict[str, tuple]) -> "ServingModel":
        """A new model at ``step`` (of the checkpoint ``source`` names: its "checkpoint", "run" and
        "commit_sha256"): the dense weights of ``dense_state`` (None: these), and per table (a
        ``SnapshotTable`` of new and changed rows in this one's form, deleted ids) applied over its rows."""
        tables = dict(self.tables)
        for name, (new, deleted) in rows.items():  # beside the served rows (``overlay.py``)
            tables[name] = overlaid(self.tables[name], new, deleted)
        runner = self.runner if dense_state is None else self.runner.reweighted(dense_state)
        return ServingModel({**self.manifest, **source, "step": step}, tables, runner, step)
