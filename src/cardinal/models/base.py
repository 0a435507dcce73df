"""What every CTR model takes and gives; models never know about parameter servers.

    forward(dense (B, n_dense) float32,
            emb   (B, n_fields, dim): one pooled embedding per sparse field,
            wide  (B, n_fields) or None: one pooled scalar weight per field, for models
                  with a first-order (linear) part, i.e. ``uses_wide = True``)
        -> logits (B,)
"""

from torch import nn

from cardinal.models.global_norm import GlobalBatchNorm


def mlp(sizes: list[int], last_activation: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if last_activation or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


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
