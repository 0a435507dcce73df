"""The peer's side of benchmarks/peers.py: its own virtual environment, the arrays it reads, its runs.

A peer library must never become a Cardinal dependency, so it is installed into a virtual
environment of its own under ``$CARDINAL_HOME/peers/deepctr`` (made once, reused after), and it
trains in a child process with that environment's python (``peers_deepctr.py``). The environment
sees this interpreter's packages through a ``.pth`` file, so both systems run the same torch and
nothing large is downloaded; ``--system-site-packages`` would not do, as it exposes the base
interpreter's packages, not the virtual environment's this benchmark runs in. deepctr-torch
imports ``requests`` (for a version check at import) without declaring it: it is installed too,
and the check is pointed at a closed local port so the child reaches no network.

The child reads what ``export`` writes: DeepCTR needs every sparse input label-encoded (codes
0..V-1 per field, as its examples do with a LabelEncoder over all rows), where Cardinal takes any
int64 id. Code 0 is a missing value (an empty bag) or padding of a multi-hot field.
"""

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import numpy as np

from cardinal.home import home

RUNNER = Path(__file__).with_name("peers_deepctr.py")
PACKAGES = ["deepctr-torch", "requests"]  # requests: imported by deepctr_torch, not declared by it
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}  # its version check fails fast


def peer_python(folder: Path | None = None) -> Path:
    """The python of the peer's environment, made (and deepctr-torch installed) on first use."""
    folder = folder or home() / "peers" / "deepctr"
    python, ready = folder / "bin" / "python", folder / "ready"
    if ready.exists():
        return python
    print(f"creating the peer's environment in {folder} (once)", flush=True)
    venv.create(folder, with_pip=True, clear=True)
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "cardinal-torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([python, "-m", "pip", "install", "-q", *PACKAGES], check=True)
    ready.write_text(" ".join(PACKAGES) + "\n")
    return python


def encode(train_bags, eval_bags) -> tuple[np.ndarray, np.ndarray, int]:
    """One sparse field's Bags (train, then eval) as (N, maxlen) int64 codes: 1.. for each distinct id
    over both splits, 0 for an empty bag or padding; and the vocabulary size (codes + 1)."""
    bags = [*train_bags, *eval_bags]
    lengths = np.concatenate([np.diff(b.offsets) for b in bags])
    values = np.concatenate([b.values for b in bags])
    ids, codes = np.unique(values, return_inverse=True)
    width = max(int(lengths.max(initial=0)), 1)
    out = np.zeros((len(lengths), width), np.int64)
    starts = np.cumsum(lengths) - lengths
    rows = np.repeat(np.arange(len(lengths)), lengths)
    out[rows, np.arange(len(values)) - np.repeat(starts, lengths)] = codes + 1
    n_train = sum(len(b.offsets) - 1 for b in train_bags)
    return out[:n_train], out[n_train:], len(ids) + 1


def export(folder: Path, train, evaluation, select_rows: int, spec: dict) -> None:
    """Write ``train.npz``, ``eval.npz`` and ``spec.json`` (``spec`` plus the fields) for the runner:
    the batches Cardinal trains and evaluates on, in the same order, dense columns as its readers
    made them; the sparse fields ``spec["without"]`` names are left out."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {"train": {}, "eval": {}}
    fields = []
    for name in (f for f in train.sparse_fields if f not in spec.get("without", ())):
        a, b, vocab = encode([x.sparse[name] for x in train], [x.sparse[name] for x in evaluation])
        arrays["train"][name], arrays["eval"][name] = a, b
        fields.append({"name": name, "vocab": vocab, "maxlen": a.shape[1]})
    for split, batches in (("train", train), ("eval", evaluation)):
        arrays[split]["dense"] = np.concatenate([x.dense.numpy() for x in batches]).astype(np.float32)
        arrays[split]["labels"] = np.concatenate([x.labels.numpy() for x in batches]).astype(np.float32)
        np.savez(folder / f"{split}.npz", **arrays[split])
    (folder / "spec.json").write_text(json.dumps({**spec, "sparse": fields, "dense": list(train.dense_fields),
                                                  "select_rows": select_rows}))


def run_peer(python: Path, folder: Path, lr: float) -> dict:
    """One peer run at ``lr`` on the exported arrays: the runner's JSON (its last line of output)."""
    done = subprocess.run([str(python), str(RUNNER), str(folder), str(lr)], capture_output=True, text=True,
                          env={**os.environ, **OFFLINE})
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise RuntimeError(f"the peer's run at lr {lr} failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])
