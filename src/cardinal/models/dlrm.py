"""DLRM (Naumov et al. 2019): bottom MLP on dense features, pairwise dot interactions, top MLP.

``dropout``: the rate after each hidden layer of the top MLP in training (``MLP``), 0 = none;
the bottom MLP's output, a vector of the dot interactions, is left whole.
``init_std``: > 0 draws both MLPs' weights but each one's last layer from N(0, init_std) (``mlp``).
"""

import torch

from cardinal.models.base import CTRModel, check_dropout, check_init_std, mlp


class DLRM(CTRModel):
    def __init__(self, n_dense: int, n_fields: int, dim: int, bottom: list[int] = (64,), top: list[int] = (256, 128),
                 dropout: float = 0.0, init_std: float = 0.0):
        super().__init__(n_dense, n_fields, dim)
        init_std = check_init_std(init_std)
        self.bottom = mlp([n_dense, *bottom, dim], init_std=init_std) if n_dense else None
        n = n_fields + (1 if n_dense else 0)
        self.pairs = torch.triu_indices(n, n, offset=1)
        self.top = mlp([(dim if n_dense else 0) + n * (n - 1) // 2, *top, 1], last_activation=False,
                       dropout=check_dropout(dropout), init_std=init_std)

    def forward(self, dense, emb, wide=None):
        vectors = emb
        parts = []
        if self.bottom is not None:
            x = self.bottom(self.dense_norm(dense))
            vectors = torch.cat([x.unsqueeze(1), emb], 1)
            parts.append(x)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))
        parts.append(dots[:, self.pairs[0], self.pairs[1]])
        return self.top(torch.cat(parts, 1)).squeeze(1)
