"""DeepFM (Guo et al. 2017): first-order weights + factorisation machine + MLP, one logit.

The FM term pairs the sparse fields' embeddings; dense features enter the linear part and
the MLP.
"""

import torch
from torch import nn

from cardinal.models.base import CTRModel, mlp


class DeepFM(CTRModel):
    uses_wide = True

    def __init__(self, n_dense: int, n_fields: int, dim: int, hidden: list[int] = (400, 400, 400)):
        super().__init__(n_dense, n_fields, dim)
        self.dense_linear = nn.Linear(n_dense, 1) if n_dense else None
        self.deep = mlp([n_fields * dim + n_dense, *hidden, 1], last_activation=False)

    def forward(self, dense, emb, wide):
        dense = self.dense_norm(dense)
        first = wide.sum(1)
        if self.dense_linear is not None:
            first = first + self.dense_linear(dense).squeeze(1)
        total = emb.sum(1)
        second = 0.5 * (total * total - (emb * emb).sum(1)).sum(1)
        deep = self.deep(torch.cat([emb.flatten(1), dense], 1)).squeeze(1)
        return first + second + deep
