"""Mixed-dimension embeddings (Ginart et al. 2019): tables of their own dims, models of one.

A recipe may give a table its own dim (``embedding.dims = {C5 = 128}``, ``embedding.dim = 16``
for the rest). The models take one dim, so each such table gets a learned linear map (no bias)
from its dim to ``embedding.dim``, applied to its fields' pooled vectors before the model.
``Projected`` wraps the model with those maps: one dense module, so the dense optimizer trains
them, DDP all-reduces them, the dense checkpoint saves them (``projections.<table>.weight``
beside ``model.*``) and the ONNX export holds them. A run whose tables all have ``embedding.dim``
gets the model itself (``with_projections``): its parameters and checkpoints are as before.

Tables of several widths cannot stack into (B, fields, dim), so ``Projected`` takes the fields'
pooled values side by side, each at its table's width, in feature order:

    features {I: "emb", C5: "C5"}, dims {emb: 2, C5: 3}, embedding.dim = 2
    emb (B, 2 + 3) = [i0 i1 | c0 c1 c2]  -> [i0 i1], [c0 c1 c2] @ W_C5 (3 -> 2)  -> (B, 2 fields, 2)
"""

import torch
from torch import nn

from cardinal.models.base import CTRModel


class Projected(nn.Module):
    """``model`` with a projection per table of another dim; forward(dense, emb (B, sum of the
    fields' dims), wide (B, fields) or None) -> logits (B,)."""

    def __init__(self, model: CTRModel, features: dict[str, str], dims: dict[str, int]):
        super().__init__()
        assert model.uses_embedding and len(features) == model.n_fields
        self.model = model
        self.dims = {t: dims[t] for t in sorted(set(features.values()))}  # table -> its dim
        self.tables = list(features.values())                              # each field's table, in feature order
        self.field_dims = [self.dims[t] for t in self.tables]
        self.projections = nn.ModuleDict({t: nn.Linear(d, model.dim, bias=False)
                                          for t, d in self.dims.items() if d != model.dim})
        assert self.projections, "every table has the model's dim: use the model itself"

    uses_wide = property(lambda self: self.model.uses_wide)
    uses_embedding = property(lambda self: self.model.uses_embedding)
    n_fields = property(lambda self: self.model.n_fields)
    dim = property(lambda self: self.model.dim)

    def forward(self, dense, emb, wide=None):
        parts = emb.split(self.field_dims, dim=1)  # (B, d_f) per field
        fields = [self.projections[t](p) if t in self.projections else p for t, p in zip(self.tables, parts)]
        return self.model(dense, torch.stack(fields, 1), wide)


def with_projections(model: CTRModel, features: dict[str, str], dims: dict[str, int]) -> nn.Module:
    """``Projected`` when a table's dim (``dims``, table -> dim) is not the model's, else ``model``."""
    if not model.uses_embedding or all(dims[t] == model.dim for t in features.values()):
        return model
    return Projected(model, features, dims)
