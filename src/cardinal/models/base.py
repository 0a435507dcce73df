"""What every CTR model takes and gives; models never know about parameter servers.

    forward(dense (B, n_dense) float32,
            emb   (B, n_fields, dim): one pooled embedding per sparse field,
            wide  (B, n_fields) or None: one pooled scalar weight per field, for models
                  with a first-order (linear) part, i.e. ``uses_wide = True``)
        -> logits (B,)
"""

import numpy as np
import torch.nn.functional as F
from torch import nn

from cardinal.models.global_norm import GlobalBatchNorm


class MLP(nn.Sequential):
    """Linear and ReLU layers; with ``dropout`` > 0, dropout after each ReLU in training mode.

    Dropout is applied in ``forward``, not as modules between the layers, so the parameter
    names (``0.weight``, ``2.weight``, ...) are the same for any rate: a checkpoint loads
    whatever ``model.dropout`` the resumed run sets. ``eval()`` turns it off; a rate of 0
    calls nothing, so no random number is drawn and runs stay bitwise as before.
    """

    def __init__(self, *layers: nn.Module, dropout: float = 0.0):
        super().__init__(*layers)
        self.dropout = dropout

    def forward(self, x):
        for layer in self:
            x = layer(x)
            if self.dropout and isinstance(layer, nn.ReLU):
                x = F.dropout(x, self.dropout, self.training)
        return x


def mlp(sizes: list[int], last_activation: bool = True, dropout: float = 0.0, init_std: float = 0.0) -> MLP:
    """Linear layers of ``sizes``, ReLU between them (and after the last with ``last_activation``).
    ``init_std`` > 0 redraws the weights of every layer but the last from N(0, init_std), as
    DeepCTR's DNN does (std 1e-4): the model then starts close to its FM and first-order parts.
    On MovieLens that is worth about +0.002 AUC, on the default recipe's generated data it loses
    (docs/performance.md, "A peer side by side"), so it is off (0: torch's own init, no draw)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if last_activation or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    if init_std:
        for layer in [m for m in layers if isinstance(m, nn.Linear)][:-1]:
            nn.init.normal_(layer.weight, 0.0, init_std)
    return MLP(*layers, dropout=dropout)


def dropout_seed(seed: int, step: int, worker: int) -> int:
    """The torch seed of one training step's dropout masks: a function of (seed, step, worker),
    so a run resumed at step k draws the masks the uninterrupted run drew, with no RNG state saved."""
    return int(np.random.SeedSequence([seed, step, worker]).generate_state(1, np.uint64)[0] >> 1)


def check_dropout(dropout: float) -> float:
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"model.dropout must be a number in [0, 1), got {dropout!r}")
    return float(dropout)


def check_init_std(init_std: float) -> float:
    if isinstance(init_std, bool) or not isinstance(init_std, (int, float)) or not 0 <= init_std < 1:
        raise ValueError(f"model.init_std must be a number in [0, 1) (0: torch's own init), got {init_std!r}")
    return float(init_std)


class CTRModel(nn.Module):
    uses_wide = False
    uses_embedding = True  # False: the rows hold no embedding columns, and emb is (B, n_fields, 0)

    def __init__(self, n_dense: int, n_fields: int, dim: int):
        super().__init__()
        if n_fields < 1 or dim < 1 or n_dense < 0:
            raise ValueError(f"a model needs n_fields >= 1, dim >= 1, n_dense >= 0; got {n_fields}, {dim}, {n_dense}")
        self.n_dense, self.n_fields, self.dim = n_dense, n_fields, dim
        # dense counts (log-transformed by the readers) still span several units: normalise
        # (over the global batch when several workers each train a share of it)
        self.dense_norm = GlobalBatchNorm(n_dense) if n_dense else nn.Identity()
