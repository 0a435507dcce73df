"""Where a checkpoint's files are, and what they are called: the names every other module of the
package (and nothing outside it) builds paths from.

    <root>/step-0000000042/
        shard-00000-of-00002/
            user.ids.npy  user.data.npy  user.count.npy  user.last_step.npy  ...  (data: portable
                              rows, ``embedding/formats/base.py``: values and state whole)
            user.deleted.npy  a delta's ids deleted since its base (``chain.py``)
            user.admission.ids.npy ...  the table's admission filter state, if it keeps any
            manifest.json     the shard's files, sizes and crc32s; written after them
        shard-00001-of-00002/ ...
        dense/state.json ...  the trainer's dense state (``dense.py``), if any
        commit.json           written last: the checkpoint exists once this file does; lists
                              every manifest and state.json (size, crc32) and checks itself

With no directory shared by the servers and the workers' rank 0, each server writes its shard
directory under its own ``--data-dir`` (``own_root``), rank 0 writes the dense state and
commit.json in its own run directory, and commit.json holds a copy of each server's manifest
("remote": which server, and the manifest it sent); a server loading its part is sent the commit.
    <root>/best.json          the run's best checkpoint (``best.py``)

A table saved in files of its own writes those instead (``Table.checkpoint_files``,
``embedding/protocol.py``): a clustered (Saec) table its map and cluster rows (``clustered.py``).
Only a directory with its ``commit.json`` is a checkpoint: an uncommitted one is never found here.
"""

import os
from pathlib import Path

FORMAT_VERSION = 2  # 2: commit.json checks itself and lists every top-level file
COMMIT = "commit.json"
MANIFEST = "manifest.json"
STATE = "state.json"  # the index of a directory of dense state (dense.py)
DENSE = "dense"  # the trainer's dense state: <step dir>/dense/state.json
COLUMNS = ("ids", "data", "count", "last_step")
DELETED = "deleted"  # a delta checkpoint's ids deleted since its base
REMOTE = "remote"  # commit.json: shard dir name -> {"server", "manifest"} of shards saved on their server's own disk
OWN = "checkpoints"  # a server's own checkpoints of job J: <--data-dir>/checkpoints/J/step-N/shard-...


def step_dir(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"step-{step:010d}"


def shard_dir(step_path: Path, shard: int, n_shards: int) -> Path:
    return step_path / f"shard-{shard:05d}-of-{n_shards:05d}"


def own_root(data_dir: str | os.PathLike, job: str) -> Path:
    """Where a server keeps its shards of job ``job``'s checkpoints when the workers' checkpoint
    directory is not inside its data directory: its own disk, whatever the workers' paths are."""
    return Path(data_dir) / OWN / job


def shard_names(n_shards: int) -> list[str]:
    """The shard directories a checkpoint of ``n_shards`` holds, exactly."""
    return [shard_dir(Path(), s, n_shards).name for s in range(n_shards)]


def admission_file(table: str, key: str) -> str:
    return f"{table}.admission.{key}.npy"


def committed(step_path: str | os.PathLike) -> bool:
    """Whether ``step_path`` is a committed checkpoint (its marker written)."""
    return (Path(step_path) / COMMIT).is_file()


def committed_steps(root: str | os.PathLike) -> list[int]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(step_of(p) for p in root.glob("step-*") if committed(p))


def latest(root: str | os.PathLike) -> Path | None:
    """The newest committed checkpoint under ``root``, or None."""
    steps = committed_steps(root)
    return step_dir(root, steps[-1]) if steps else None


def step_of(path: Path) -> int:
    """The step a ``step-N`` directory is named for; -1 for another name."""
    try:
        return int(path.name.split("-", 1)[1])
    except (IndexError, ValueError):
        return -1
