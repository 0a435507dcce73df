"""A clustered (Saec) table in a checkpoint: its map and its cluster rows, verified like every file.

A shard's manifest entry of a clustered table carries ``"saec": {"shift", "clusters"}`` (the
clustering's slots; the default ones follow) and these files instead of a table's four:

    <table>.ids.npy            (n,) int64     every id the table answers for, unique, routing here
    <table>.slot.npy           (n,) int32     its cluster row's slot
    <table>.count.npy, <table>.last_step.npy  (n,) uint32: its sightings and last step
    <table>.cluster_slot.npy   (k,) int64     0 .. k-1: the cluster rows, in slot order
    <table>.cluster_data.npy   (k, width) float32: portable rows (values and optimizer state)
    <table>.cluster_count.npy, <table>.cluster_last_step.npy   (k,) uint32
    <table>.default_field.npy  (d,) int64     the field of each default slot clusters + i

``rows`` in the manifest is n. Each file is checked by size and crc32, dtype and shape; ids must
be unique and route to the shard that saved them, slots must name a cluster row, values be finite.
A clustered table loads only into the shard count that saved it: its clusters are per shard, and a
shard taking part of another's ids would need a copy of their clusters (one cluster on two shards).
It is never in a delta checkpoint (``ShardStore.save`` refuses one).

The table writes these files through ``Table.checkpoint_files`` (``SaecTable.checkpoint_files``: its
``state`` and the manifest's "saec", ``embedding/clustered_table.py``); ``read`` here gives its state
back (``Reader.clustered``: the store makes the table of it with ``SaecTable.from_state``), and
``verify.py`` checks a manifest entry with ``KEY`` in it by ``check_meta``.
"""

from pathlib import Path

import numpy as np

from cardinal.checkpoint.durable import load_array, verify_file
from cardinal.embedding import formats
from cardinal.embedding.clustered_table import CHECKPOINT_KEY as KEY  # in a manifest entry: the table is clustered
from cardinal.sharding.routing import route

DTYPES = {"ids": np.int64, "slot": np.int32, "count": np.uint32, "last_step": np.uint32,
          "cluster_slot": np.int64, "cluster_data": np.float32, "cluster_count": np.uint32,
          "cluster_last_step": np.uint32, "default_field": np.int64}
COLUMNS = tuple(DTYPES)


def check_meta(where: str, entry: dict) -> None:
    """A manifest entry's "saec" object is well formed (the files are checked by ``read``)."""
    meta = entry[KEY]
    if not isinstance(meta, dict) or set(meta) != {"shift", "clusters"} \
            or not all(isinstance(meta[k], int) and not isinstance(meta[k], bool) for k in meta) \
            or not 1 <= meta["shift"] <= 63 or meta["clusters"] < 0:
        raise ValueError(f"{where}: 'saec' must be {{\"shift\": 1..63, \"clusters\": >= 0}}, got {meta!r}")


def refuse_reshard(step_path: Path, info: dict, name: str, n_shards: int) -> None:
    """A clustered table loads only into the shard count that saved it: a ValueError otherwise
    (``info``: the checkpoint's commit, its "n_shards" and "manifests", ``verify.py``)."""
    if info["n_shards"] != n_shards and any(KEY in m["tables"].get(name, {}) for m in info["manifests"].values()):
        raise ValueError(f"checkpoint {step_path.name}: table {name!r} is clustered (Saec), each of its "
                         f"{info['n_shards']} shards holding its own clusters; it loads only into "
                         f"{info['n_shards']} shards, not {n_shards}: set ps.shards = {info['n_shards']} (or "
                         f"ps.servers to {info['n_shards']} servers)")


def read(step_path: Path, info: dict, base: Path, shard: int, name: str) -> tuple[dict, int, int]:
    """Shard ``shard``'s clustered table ``name`` from its own files in ``base`` (its directory), every
    one verified: (its ``SaecTable.state``, clusters, shift)."""
    manifest = next(m for m in info["manifests"].values() if m["shard"] == shard)
    entry = manifest["tables"][name]
    n, k, width = entry["rows"], None, entry["width"]
    state = {}
    for column in COLUMNS:
        path = base / entry["files"][column]["file"]
        verify_file(path, entry["files"][column])
        array = np.asarray(load_array(path, mmap=False))
        k = len(array) if column == "cluster_slot" else k
        shape = {"ids": (n,), "slot": (n,), "count": (n,), "last_step": (n,), "cluster_data": (k, width),
                 "default_field": array.shape if array.ndim == 1 else None}.get(column, (k,))
        if array.dtype != DTYPES[column] or array.shape != shape:
            raise ValueError(f"checkpoint file {path}: holds {array.dtype} {array.shape}, its manifest needs "
                             f"{np.dtype(DTYPES[column])} {shape}")
        state[column] = array
    where = f"checkpoint file {base / entry['files']['ids']['file']}"
    if len(np.unique(state["ids"])) != n:
        raise ValueError(f"{where}: holds duplicate ids")
    wrong = np.flatnonzero(route(state["ids"], info["n_shards"]) != shard)
    if len(wrong):
        raise ValueError(f"{where}: ids (e.g. {state['ids'][wrong[0]]}) do not route to shard {shard} of "
                         f"{info['n_shards']}, which saved them (a file from another shard?)")
    clusters, d = entry[KEY]["clusters"], len(state["default_field"])
    if not np.array_equal(state["cluster_slot"], np.arange(clusters + d)) \
            or len(np.unique(state["default_field"])) != d:
        raise ValueError(f"checkpoint {step_path.name}, shard {shard}, table {name!r}: cluster slots must be "
                         f"0 .. {clusters + d - 1} ({clusters} clusters, {d} distinct default fields)")
    if n and not (0 <= state["slot"].min() and state["slot"].max() < clusters + d):
        raise ValueError(f"checkpoint {step_path.name}, shard {shard}, table {name!r}: an id's slot names no "
                         f"cluster row")
    bad = formats.get(entry.get("storage", "fp32")).first_nonfinite(
        state["cluster_data"], np.arange(len(state["cluster_data"])), 0, len(state["cluster_data"]), entry["dim"])
    if bad >= 0:
        raise ValueError(f"checkpoint file {base / entry['files']['cluster_data']['file']}: cluster row {bad} "
                         "holds NaN or Inf")
    return state, clusters, entry[KEY]["shift"]
