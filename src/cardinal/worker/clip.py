"""CowClip (Zheng et al., AAAI 2023): per-id clipping of embedding gradients, on the worker before the push.

Each id's gradient row g (summed over its uses in the batch, as pushed) is scaled down to

    ||g|| <= cnt * max(ratio * ||w||, floor)

where cnt is the id's uses in the batch (from the dedup's inverse) and w its row as pulled for
this step. A frequent id may move further per step than a rare one, and no id's step is large
against its own weights; the paper uses it to train CTR models on very large batches, where
the summed gradients of frequent ids grow with the batch. ``floor`` (``embedding.clip_min``)
keeps rows at or near zero trainable.

    g (U, width), w (U, width), cnt (U,):  bound_u = cnt_u * max(ratio * |w_u|, floor)
    g_u * (bound_u / |g_u|)  where |g_u| > bound_u;  g_u unchanged (same bits) elsewhere

The whole pushed row is one vector: with a wide part (DeepFM, Wide&Deep) its first-order
weight is the row's last column and is clipped with the embedding. With several workers each
clips its share of the batch by its share's counts (the servers then sum the shares), so the
bound is the same in total but not applied to the same sum as in one process.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CowClip:
    ratio: float          # embedding.clip_ratio, > 0
    floor: float = 1e-5   # embedding.clip_min

    def __post_init__(self):
        if not (0 < self.ratio < np.inf and 0 <= self.floor < np.inf):
            raise ValueError(f"CowClip needs 0 < clip_ratio and 0 <= clip_min, both finite; got {self.ratio}, "
                             f"{self.floor}")

    @staticmethod
    def from_config(embedding) -> "CowClip | None":
        """The recipe's clipping, or None when ``embedding.clip_ratio`` is 0 (the default: off)."""
        return CowClip(embedding.clip_ratio, embedding.clip_min) if embedding.clip_ratio else None

    def __call__(self, grads: np.ndarray, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Clipped gradients, a new array.

        grads,   # (U, width) float32: one row per unique id, summed over its uses
        rows,    # (U, width) float32: the rows as pulled
        counts,  # (U,) int64: uses of each id in the batch, >= 1
        """
        f32 = np.float32
        w_norm = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=f32))
        g_norm = np.sqrt(np.einsum("ij,ij->i", grads, grads, dtype=f32))
        bound = counts.astype(f32) * np.maximum(f32(self.ratio) * w_norm, f32(self.floor))
        over = g_norm > bound
        scale = np.ones(len(grads), f32)
        scale[over] = bound[over] / g_norm[over]
        return grads * scale[:, None]
