"""Dense model and optimizer state in a checkpoint, without pickle.

A torch ``state_dict`` (nested dicts and lists of tensors and plain values) becomes one
``.npy`` file per tensor plus ``state.json``, which holds the structure, each file's size
and crc32. Integer dict keys (as in optimizer state) survive the round trip.

    {"state": {0: {"step": tensor(3.), "exp_avg": tensor([...])}}, "param_groups": [...]}
    -> state.json: {"tree": {"__dict__": [["state", {"__dict__": [[0, ...]]}], ...]},
                    "files": {"t0.npy": {"bytes": ..., "crc32": ...}, ...}}

The only module of the package that imports torch: a server, which never does, never imports it
(``Reader.dense_state`` imports it when asked).
"""

import re
from pathlib import Path

import numpy as np
import torch

from cardinal.checkpoint.durable import check_name, load_array, read_json, verify_file, write_array, write_json
from cardinal.checkpoint.layout import STATE  # what write.commit lists, so commit.json covers it

_TENSOR_FILE = re.compile(r"t[0-9]+\.npy")


def save_tree(out: Path, tree) -> None:
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict] = {}

    def encode(x):
        if isinstance(x, torch.Tensor):
            name = f"t{len(files)}.npy"
            files[name] = write_array(out / name, x.detach().cpu().numpy())
            return {"__tensor__": name}
        if isinstance(x, dict):
            return {"__dict__": [[k, encode(v)] for k, v in x.items()]}
        if isinstance(x, (list, tuple)):
            return {"__list__": [encode(v) for v in x]}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise TypeError(f"cannot save a {type(x).__name__} in dense state")

    tree_json = encode(tree)
    write_json(out / STATE, {"tree": tree_json, "files": files})


def load_tree(out: Path, entry: dict):
    """The saved tree, verified before any tensor is read: ``state.json`` against ``entry``
    (its size and crc32 as the checkpoint's commit.json lists them), then every file it
    names. A tensor must be a plain file name listed in ``files``; float tensors must be finite."""
    index = out / STATE
    verify_file(index, entry)
    meta = read_json(index)
    files = meta.get("files")
    if not isinstance(files, dict) or "tree" not in meta:
        raise ValueError(f"{index}: must hold 'tree' and 'files'")
    for name, file_entry in files.items():
        check_name(name, str(index), _TENSOR_FILE)
        verify_file(out / name, file_entry)

    def decode(x):
        if isinstance(x, dict):
            if "__tensor__" in x:
                return tensor(x["__tensor__"])
            if "__dict__" in x:
                return {k: decode(v) for k, v in x["__dict__"]}
            if "__list__" in x:
                return [decode(v) for v in x["__list__"]]
            raise ValueError(f"{index}: unknown node with keys {sorted(x)}")
        return x

    def tensor(name):
        if not isinstance(name, str) or name not in files:
            raise ValueError(f"{index}: tensor file {name!r} is not listed in its 'files' (nothing unlisted is read)")
        array = load_array(out / name, mmap=False)  # a memory map would make 0-d arrays 1-d
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(f"checkpoint file {out / name}: holds NaN or Inf")
        return torch.from_numpy(array)

    try:
        return decode(meta["tree"])
    except (TypeError, KeyError) as e:  # a malformed tree: name the file, not the Python error
        raise ValueError(f"{index}: malformed tree ({type(e).__name__}: {e})") from None
