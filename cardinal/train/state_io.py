"""Dense model and optimizer state in a checkpoint, without pickle.

A torch ``state_dict`` (nested dicts and lists of tensors and plain values) becomes one
``.npy`` file per tensor plus ``state.json``, which holds the structure, each file's size
and crc32. Integer dict keys (as in optimizer state) survive the round trip.

    {"state": {0: {"step": tensor(3.), "exp_avg": tensor([...])}}, "param_groups": [...]}
    -> state.json: {"tree": {"__dict__": [["state", {"__dict__": [[0, ...]]}], ...]},
                    "files": {"t0.npy": {"bytes": ..., "crc32": ...}, ...}}
"""

from pathlib import Path

import numpy as np
import torch

from cardinal.durable import read_json, verify_file, write_array, write_json


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
    write_json(out / "state.json", {"tree": tree_json, "files": files})


def load_tree(out: Path):
    """The saved tree, every file verified (size, crc32) before any is read."""
    meta = read_json(out / "state.json")
    for name, entry in meta["files"].items():
        verify_file(out / name, entry)

    def decode(x):
        if isinstance(x, dict):
            if "__tensor__" in x:
                return torch.from_numpy(np.load(out / x["__tensor__"], allow_pickle=False).copy())
            if "__dict__" in x:
                return {k: decode(v) for k, v in x["__dict__"]}
            return [decode(v) for v in x["__list__"]]
        return x

    return decode(meta["tree"])
