"""DeepCTR-Torch's DeepFM on the arrays benchmarks/peers.py exported; prints one JSON line.

    <peer venv>/bin/python benchmarks/peers_deepctr.py DIR LR

Run by peers.py with the peer's own virtual environment, so it imports deepctr_torch and never
cardinal (the package must not become one of Cardinal's dependencies, nor Cardinal one of its).
DIR holds ``spec.json`` (fields, model size, batch, epochs, dense lr), ``train.npz`` and
``eval.npz``: per sparse field an (N, maxlen) int64 matrix of label codes (0 = missing or
padding, as DeepCTR's masks expect; maxlen 1 is a ``SparseFeat``, more a ``VarLenSparseFeat``
pooled like Cardinal's rows), the dense columns already transformed as Cardinal's readers do,
and the labels.

The model is the library's, trained by the library's own ``fit`` (verbose 0: no per-batch
metrics; no shuffling: the batches Cardinal trains on, in its order). Its one optimizer slot
takes a pair: Adagrad at LR on the embedding tables (the sparse side, as Cardinal's servers run
it) and Adam at the recipe's dense lr on the rest, both on torch's fused kernels (as Cardinal's
dense optimizer runs). The library's L2 terms are set to 0: Cardinal
has none, and they would add a pass over every table to each step. ``train_s`` is ``fit``'s wall
time: first step to last update, no evaluation inside. AUC and logloss are on the two halves of
the eval rows (select: where peers.py picks the lr; eval: what it reports). ``spec["dnn_init"]
= "torch"`` (benchmarks/peers_gap.py) redraws the DNN's hidden layers as torch's ``nn.Linear``
draws them, instead of the library's N(0, init_std = 1e-4).
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import log_loss, roc_auc_score

from deepctr_torch.inputs import DenseFeat, SparseFeat, VarLenSparseFeat
from deepctr_torch.models import DeepFM


class Pair:
    """Two torch optimizers behind the one ``zero_grad``/``step`` that DeepCTR's ``fit`` calls."""

    def __init__(self, *optimizers):
        self.optimizers = optimizers

    def zero_grad(self):
        for o in self.optimizers:
            o.zero_grad()

    def step(self):
        for o in self.optimizers:
            o.step()


def columns(spec: dict) -> list:
    cols = []
    for f in spec["sparse"]:
        feat = SparseFeat(f["name"], f["vocab"], embedding_dim=spec["dim"])
        cols.append(feat if f["maxlen"] == 1 else VarLenSparseFeat(feat, f["maxlen"], combiner=spec["pooling"]))
    return cols + [DenseFeat(name, 1) for name in spec["dense"]]


def inputs(arrays, spec: dict) -> dict:
    x = {f["name"]: arrays[f["name"]][:, 0] if f["maxlen"] == 1 else arrays[f["name"]] for f in spec["sparse"]}
    dense = arrays["dense"]
    return {**x, **{name: dense[:, i] for i, name in enumerate(spec["dense"])}}


def metrics(labels: np.ndarray, probs: np.ndarray) -> list[float]:
    return [float(roc_auc_score(labels, probs)), float(log_loss(labels, np.clip(probs, 1e-7, 1 - 1e-7)))]


def main():
    folder, lr = Path(sys.argv[1]), float(sys.argv[2])
    spec = json.loads((folder / "spec.json").read_text())
    train, evaluation = np.load(folder / "train.npz"), np.load(folder / "eval.npz")
    cols = columns(spec)
    model = DeepFM(cols, cols, dnn_hidden_units=tuple(spec["hidden"]), l2_reg_linear=0.0, l2_reg_embedding=0.0,
                   seed=spec["seed"], task="binary", device="cpu")
    if spec.get("dnn_init", "deepctr") == "torch":
        for layer in model.dnn.linears:
            layer.reset_parameters()
    tables = [p for name, p in model.named_parameters() if "embedding_dict" in name]
    rest = [p for name, p in model.named_parameters() if "embedding_dict" not in name]
    model.compile(Pair(torch.optim.Adagrad(tables, lr=lr, initial_accumulator_value=spec["initial_accumulator"],
                                           fused=True),  # torch's fused kernels, as Cardinal's dense optimizer
                       torch.optim.Adam(rest, lr=spec["dense_lr"], fused=True)), "binary_crossentropy")
    x, y = inputs(train, spec), train["labels"]
    start = time.perf_counter()
    model.fit(x, y, batch_size=spec["batch_size"], epochs=spec["epochs"], verbose=0, shuffle=False)
    seconds = time.perf_counter() - start
    probs = model.predict(inputs(evaluation, spec), batch_size=8192).reshape(-1)
    labels, cut = evaluation["labels"], spec["select_rows"]
    samples = len(y) * spec["epochs"]
    print(json.dumps({"lr": lr, "train_s": seconds, "samples": samples, "samples_per_s": samples / seconds,
                      "select": metrics(labels[:cut], probs[:cut]), "eval": metrics(labels[cut:], probs[cut:]),
                      "deepctr_torch": __import__("deepctr_torch").__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
