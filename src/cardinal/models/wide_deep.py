"""Wide & Deep (Cheng et al. 2016): a linear model over the ids plus an MLP over embeddings.

``dropout``: the rate after each hidden layer of the MLP in training (``MLP``), 0 = none.
``init_std``: > 0 draws the hidden layers' weights from N(0, init_std) (``mlp``), 0 = torch's init.
"""

import torch
from torch import nn

from cardinal.models.base import CTRModel, check_dropout, check_init_std, mlp


class WideDeep(CTRModel):
    uses_wide = True

    def __init__(self, n_dense: int, n_fields: int, dim: int, hidden: list[int] = (400, 400, 400),
                 dropout: float = 0.0, init_std: float = 0.0):
        super().__init__(n_dense, n_fields, dim)
        self.dense_linear = nn.Linear(n_dense, 1) if n_dense else None
        self.deep = mlp([n_fields * dim + n_dense, *hidden, 1], last_activation=False, dropout=check_dropout(dropout),
                        init_std=check_init_std(init_std))

    def forward(self, dense, emb, wide):
        dense = self.dense_norm(dense)
        logit = wide.sum(1) + self.deep(torch.cat([emb.flatten(1), dense], 1)).squeeze(1)
        if self.dense_linear is not None:
            logit = logit + self.dense_linear(dense).squeeze(1)
        return logit
