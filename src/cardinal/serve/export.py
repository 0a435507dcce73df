"""``cardinal export RUN_DIR --out DIR``: a trained model as serving needs it, and nothing more.

    DIR/model.onnx        the dense model, probabilities out (``onnx_model.py``), with its projections
                          when tables have dims of their own (``models/projection.py``; manifest "dims")
    DIR/tables/<t>.*.npy  each model table's live rows, sorted by id, in the chosen form (``tables.py``)
    DIR/manifest.json     written last: the recipe, fields, tables, the checkpoint it came from (its
                          run and commit digest: what a follower applies deltas on), and every
                          file's size and crc32 (checked when ``cardinal serve`` loads it)

No optimizer state, request logs, counts or baseline tables leave the run. The rows are read by
loading the checkpoint (full, or a delta chain, of any shard count, any row format, any tier)
into one shard in this process, then pulling every id as a lookup: the values
``cardinal eval`` pulls, so predictions from the export equal its own.
"""

import json
import math
import shutil
from pathlib import Path

import numpy as np

from cardinal.checkpoint.best import best_checkpoint
from cardinal.checkpoint.durable import file_entry, fsync_dir, write_json
from cardinal.checkpoint.layout import COMMIT, committed, latest
from cardinal.serve.tables import FORMS, SnapshotTable

MANIFEST = "manifest.json"
KIND = "cardinal-export"
LAYOUTS = ("synthetic", "criteo", "parquet")  # the data formats whose rows a request can carry (serve/requests.py)
FIELD_SHIFT = {"movielens": 40}  # where an id's field bits start (the readers put them there); 32 otherwise


def find_checkpoint(run_dir: Path, checkpoint: str | Path | None = None) -> Path:
    """``checkpoint``, else the run's best (``best.json``), else its newest committed one."""
    if checkpoint is not None:
        path = Path(checkpoint)
        if not committed(path):
            raise ValueError(f"{path} is not a committed checkpoint (no {COMMIT})")
        return path
    root = Path(run_dir) / "checkpoints"
    found = best_checkpoint(root) or latest(root)
    if found is None:
        raise ValueError(f"{run_dir} has no committed checkpoint to export")
    return found


def run_recipe(run_dir: Path):
    from cardinal.recipe import from_dict
    from cardinal.train.resume import saved_recipe

    return from_dict(saved_recipe(Path(run_dir)))


def model_of(recipe, state: dict):
    """The recipe's dense model with ``state`` loaded, in eval mode."""
    from cardinal.models import MODELS
    from cardinal.models.projection import with_projections
    from cardinal.train import tables

    spec = dict(recipe.model)
    model = MODELS[spec.pop("name")](len(dense_fields(recipe)), len(tables.sparse_fields(recipe)),
                                     recipe.embedding.dim, **spec)
    model = with_projections(model, tables.features(recipe), tables.table_dims(recipe))  # embedding.dims
    try:
        model.load_state_dict(state)
    except RuntimeError as e:  # missing, unexpected or misshapen weights
        raise ValueError(f"the checkpoint's dense model is not this run's {recipe.model['name']!r} model (is it "
                         f"another run's?): {str(e).splitlines()[0]}") from None
    return model.eval()


def next_step(manifest: dict, out) -> str:
    """What `cardinal export` tells the user to do with the export at ``out``."""
    if manifest["data_format"] in LAYOUTS:
        return f"serve it with: cardinal serve {out}"
    return (f"cardinal serve parses Criteo-layout requests only, so load it with "
            f"cardinal.serve.model.ServingModel.load({str(out)!r})")


def dense_fields(recipe) -> list[str]:
    from cardinal.data import criteo, movielens

    return list(movielens.DENSE if recipe.data.format == "movielens" else criteo.DENSE)


def load_store(recipe, step_path: Path | None = None, shard: int = 0, n_shards: int = 1):
    """A store in this process holding shard ``shard`` of ``n_shards`` of the checkpoint, all in RAM
    (``step_path`` None: empty)."""
    from cardinal.ps import ShardStore
    from cardinal.train import tables

    store = ShardStore(tables.store_config(recipe), shard, n_shards)
    if step_path is not None:
        store.load(str(step_path))
    return store


def load_stores(recipe, saved) -> list:
    """Every shard of the checkpoint ``saved`` (a ``Reader``), each in a store of its own, as it was
    saved: a clustered table (Saec) loads only into the shard count that saved it."""
    stores = []
    try:
        for shard in range(saved.n_shards):
            stores.append(load_store(recipe, saved.path, shard, saved.n_shards))
    except BaseException:
        close_all(stores)
        raise
    return stores


def close_all(stores: list) -> None:
    for store in stores:
        store.close()


def table_rows(stores: list, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids, float32 rows) of every row of table ``name`` in ``stores``: what an eval pull reads."""
    ids = [s.tables[name].export()["ids"] for s in stores]
    values = [lookup(s.tables[name], i) for s, i in zip(stores, ids)]
    return np.concatenate(ids), np.concatenate(values)


def lookup(table, ids: np.ndarray, block: int = 1 << 14) -> np.ndarray:
    """``table.pull(ids, create=False)`` a block at a time: a serving process reloading beside its
    requests holds the interpreter lock for one block's worth (~0.3 ms), not for the whole table."""
    if len(ids) <= block:
        return table.pull(ids, create=False)
    return np.concatenate([table.pull(ids[i:i + block], create=False) for i in range(0, len(ids), block)])


def export_run(run_dir: str | Path, out: str | Path, checkpoint: str | Path | None = None, form: str = "fp32",
               ratio: float = 20.0) -> dict:
    """Write the export of ``run_dir``'s checkpoint into ``out`` (new or empty); returns the manifest."""
    if form not in FORMS:
        raise ValueError(f"--tables must be one of {', '.join(FORMS)}, got {form!r}")
    if form == "saec" and not (ratio >= 1 and math.isfinite(ratio)):
        raise ValueError(f"--ratio is rows per cluster, >= 1; got {ratio!r}")
    run_dir, out = Path(run_dir), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty directory: export into a new one")
    if any(p.exists() and not p.is_dir() for p in out.parents):
        raise ValueError(f"{out}: {next(p for p in out.parents if p.exists() and not p.is_dir())} is a file, "
                         "not a directory")
    from cardinal.checkpoint.reader import Reader

    recipe = run_recipe(run_dir)
    saved = Reader(find_checkpoint(run_dir, checkpoint).resolve())
    model = model_of(recipe, saved.dense_state()["model"])
    stores = load_stores(recipe, saved)
    made = not out.exists()
    try:
        return _write(recipe, model, stores, saved, out, form, ratio)
    except BaseException:
        if made:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for p in out.iterdir():
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        raise
    finally:
        close_all(stores)


def _write(recipe, model, stores: list, saved, out: Path, form: str, ratio: float) -> dict:
    from cardinal.compression.clustered import ClusteredTable, cluster_table
    from cardinal.models.projection import Projected
    from cardinal.serve.onnx_model import export_onnx
    from cardinal.train import tables

    (out / "tables").mkdir(parents=True, exist_ok=True)
    files, table_info = {}, {}
    for name in sorted(set(tables.features(recipe).values())):
        ids, values = table_rows(stores, name)
        clusters = None
        if form == "saec":  # each shard's rows clustered per field, as a server would
            shift = FIELD_SHIFT.get(recipe.data.format, 32)
            clusters = ClusteredTable.combine([cluster_table(s.tables[name], shift, ratio) for s in stores])
        snap = SnapshotTable.build(ids, values, form, clusters=clusters)
        files |= {f"tables/{k}": v for k, v in snap.save(out / "tables", name).items()}
        table_info[name] = {"form": form, "width": snap.width, "rows": len(snap), "bytes": snap.nbytes,
                            **({"ratio": ratio, "vectors": len(clusters.vectors)} if form == "saec" else {})}
    export_onnx(model, len(dense_fields(recipe)), out / "model.onnx")
    files["model.onnx"] = file_entry(out / "model.onnx")
    fsync_dir(out / "tables")
    manifest = {"kind": KIND, "version": 1, "step": stores[0].step, "checkpoint": str(saved.path), **saved.identity,
                "data_format": recipe.data.format, "model": recipe.model["name"],
                "dim": recipe.embedding.dim, "uses_wide": bool(model.uses_wide),
                "uses_embedding": bool(model.uses_embedding), "pooling": recipe.embedding.pooling,
                "hash_buckets": recipe.compression.hash_buckets, "dense_fields": dense_fields(recipe),
                "features": [[f, t] for f, t in tables.features(recipe).items()],  # pairs: the JSON sorts keys
                "tables": table_info, "files": files,
                **({"dims": model.dims} if isinstance(model, Projected) else {}),  # the graph's emb: side by side
                "recipe": recipe_dict(recipe)}
    write_json(out / MANIFEST, manifest)
    fsync_dir(out)
    return manifest


def recipe_dict(recipe) -> dict:
    return json.loads(json.dumps(recipe.to_dict(), default=str))
