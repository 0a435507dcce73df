"""A plain PyTorch training loop on a recipe's batches: the reference Cardinal's sparse updates are
measured against (``rowwise_trace.py``), with no parameter server in the way.

The recipe's own model, data and dense optimizer; the embedding rows in one numpy array, each new id
starting from Cardinal's initial values (``init_rows``: uniform from (seed, id)) and the sparse state
at ``initial_accumulator``; pooling by ``F.embedding_bag``; after backward the unique rows' gradients
update them by the hand-written optimizers below, as FBGEMM writes them:

    adagrad:         s += g * g;                      w -= lr * g / (sqrt(s) + eps)   (per element)
    rowwise_shared:  s += mean(g * g) over the row;   w -= lr * g / (sqrt(s) + eps)   (one s a row,
                     a wide part's weight included: fbgemm's update applied to the packed row)
    rowwise_own:     as rowwise_shared over the dim embedding values; a wide part's weight keeps an
                     s of its own (as in TorchRec, where first-order weights are a table of dim 1)

Only one process, one step at a time (sync): what Cardinal computes in sync mode with one worker.
"""

import numpy as np
import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import binary_auroc

from cardinal.embedding.hashing import init_rows
from cardinal.optim import make_optimizer
from cardinal.train import builder
from cardinal.train.readers import make_readers

VARIANTS = ("adagrad", "rowwise_shared", "rowwise_own")


class PlainLoop:
    def __init__(self, recipe, variant: str, model_state: dict | None = None):
        if variant not in VARIANTS:
            raise ValueError(f"variant {variant!r}: one of {VARIANTS}")
        self.recipe, self.variant = recipe, variant
        torch.manual_seed(recipe.train.seed)  # as Trainer: the same dense weights
        self.train_data, self.eval_data, _ = make_readers(recipe.data, recipe.train.seed, False)
        self.model = builder.model(recipe, self.train_data)
        if model_state is not None:
            self.model.load_state_dict(model_state)
        self.fields = list(self.train_data.sparse_fields)
        self.dim, self.wide = recipe.embedding.dim, self.model.uses_wide
        self.width = self.dim + int(self.wide)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=recipe.dense_optimizer.lr, fused=True)
        o = make_optimizer(recipe.sparse_optimizer).config
        self.lr, self.eps, self.acc0 = np.float32(o.lr), np.float32(o.eps), np.float32(o.initial_accumulator)
        self.index: dict[int, int] = {}  # id -> row
        self.values = np.zeros((0, self.width), np.float32)
        self.state = np.zeros((0, self.width), np.float32)  # per element (row-wise: one value repeated)

    def _fresh(self, ids: np.ndarray) -> np.ndarray:
        rows = np.zeros((len(ids), self.width), np.float32)
        e = self.recipe.embedding
        init_rows(ids.astype(np.int64), rows, 0, len(ids), self.width, np.int64(e.seed), np.float32(e.init_scale), 0)
        return rows

    def rows_of(self, ids: np.ndarray, create: bool = True) -> np.ndarray:
        """Row numbers of ``ids`` (new ids get a fresh row with ``create``, else -1)."""
        new = [i for i in ids.tolist() if i not in self.index]
        if new and create:
            start = len(self.index)
            self.index.update((i, start + k) for k, i in enumerate(new))
            self.values = np.concatenate([self.values, self._fresh(np.array(new, np.int64))])
            self.state = np.concatenate([self.state, np.full((len(new), self.width), self.acc0, np.float32)])
        return np.array([self.index.get(i, -1) for i in ids.tolist()], np.int64)

    def _bags(self, batch):
        values, offsets, base = [], [], 0
        for f in self.fields:
            bag = batch.sparse[f]
            values.append(bag.values)
            offsets.append(bag.offsets[:-1] + base)
            base += len(bag.values)
        return np.concatenate(values), torch.from_numpy(np.concatenate(offsets))

    def _forward(self, batch, rows: torch.Tensor, inverse: np.ndarray, offsets: torch.Tensor):
        x = F.embedding_bag(torch.from_numpy(inverse.astype(np.int64)), rows, offsets, mode="sum")
        x = x.view(len(self.fields), len(batch), self.width).transpose(0, 1)
        return self.model(batch.dense, x[..., :self.dim], x[..., self.dim] if self.wide else None)

    def step(self, batch) -> dict:
        """Train on one batch; returns its loss and the unique ids, their gradients and rows."""
        values, offsets = self._bags(batch)
        ids, inverse = np.unique(values, return_inverse=True)
        r = self.rows_of(ids)
        rows = torch.from_numpy(self.values[r]).requires_grad_(True)
        loss = F.binary_cross_entropy_with_logits(self._forward(batch, rows, inverse, offsets), batch.labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        g = rows.grad.numpy()
        self.values[r], self.state[r] = self._update(self.values[r], self.state[r], g)
        return {"loss": float(loss.detach()), "ids": ids, "grads": g, "rows": r}

    def _update(self, w: np.ndarray, s: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = self.dim
        if self.variant == "adagrad":
            s = s + g * g
        elif self.variant == "rowwise_shared":
            s = s + (g * g).mean(1, keepdims=True, dtype=np.float32)
        else:
            s = s.copy()
            s[:, :d] += (g[:, :d] * g[:, :d]).mean(1, keepdims=True, dtype=np.float32)
            s[:, d:] += g[:, d:] * g[:, d:]
        return w - self.lr * g / (np.sqrt(s) + self.eps), s

    def state_words(self, r: np.ndarray) -> np.ndarray:
        """The state of rows ``r`` as Cardinal stores it after the values (``optim/``)."""
        if self.variant == "adagrad":
            return self.state[r]
        return self.state[r][:, [0, self.dim] if self.variant == "rowwise_own" and self.wide else [0]]

    def train(self) -> None:
        for batch in self.train_data:
            self.step(batch)

    def evaluate(self) -> dict:
        """AUC and logloss on the eval split (ids never trained read zeros, as Cardinal's evaluation)."""
        self.model.eval()
        logits, labels = [], []
        with torch.no_grad():
            for batch in self.eval_data:
                values, offsets = self._bags(batch)
                ids, inverse = np.unique(values, return_inverse=True)
                r = self.rows_of(ids, create=False)
                rows = np.zeros((len(ids), self.width), np.float32)
                rows[r >= 0] = self.values[r[r >= 0]]
                logits.append(self._forward(batch, torch.from_numpy(rows), inverse, offsets))
                labels.append(batch.labels)
        self.model.train()
        logit, label = torch.cat(logits), torch.cat(labels)
        return {"auc": float(binary_auroc(logit, label.long())),
                "logloss": float(F.binary_cross_entropy_with_logits(logit, label))}
