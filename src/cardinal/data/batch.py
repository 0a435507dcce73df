"""What every reader yields: one batch of dense features, sparse ids and labels.

    Batch(dense   = float32 (B, n_dense),
          sparse  = {"C1": Bag(values=[a, b, c], offsets=[0, 1, 1, 3]), ...},   # B = 3
          labels  = float32 (B,))

A ``Bag`` is one sparse field for the whole batch: example i has ids
``values[offsets[i]:offsets[i+1]]`` (int64, any value; empty bags allowed; several ids =
multi-hot). Ids of different fields never collide by construction of the readers, so
fields may share a table.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch


class Bag(NamedTuple):
    values: np.ndarray   # (nnz,) int64
    offsets: np.ndarray  # (B + 1,) int64


@dataclass
class Batch:
    dense: torch.Tensor
    sparse: dict[str, Bag]
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)


def single_hot(ids: np.ndarray, present: np.ndarray) -> Bag:
    """A Bag with one id per example where ``present``, an empty bag elsewhere."""
    offsets = np.zeros(len(ids) + 1, np.int64)
    np.cumsum(present, out=offsets[1:])
    return Bag(np.ascontiguousarray(ids[present], dtype=np.int64), offsets)
