"""Logistic regression: the baseline every CTR model must beat.

One weight per id (the rows' first-order column, as the wide part of DeepFM and Wide&Deep
uses it, so its rows are 1 value wide) plus a linear layer over the normalised dense features:

    logit = sum over fields of w[id] + dense_linear(norm(dense))

It takes the same pooled inputs as every model and ignores ``emb`` (B, n_fields, 0).
"""

import torch
from torch import nn

from cardinal.models.base import CTRModel


class LogisticRegression(CTRModel):
    uses_wide = True
    uses_embedding = False  # rows hold the first-order weight only

    def __init__(self, n_dense: int, n_fields: int, dim: int):
        super().__init__(n_dense, n_fields, dim)
        self.dense_linear = nn.Linear(n_dense, 1) if n_dense else None
        self.bias = None if n_dense else nn.Parameter(torch.zeros(()))

    def forward(self, dense, emb, wide):
        logit = wide.sum(1)
        if self.dense_linear is not None:
            return logit + self.dense_linear(self.dense_norm(dense)).squeeze(1)
        return logit + self.bias
