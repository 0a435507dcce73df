"""DeepFM (Guo et al. 2017): Wide&Deep plus a factorisation machine over the sparse fields.

    logit = wide (first-order weights + linear dense part) + MLP (as Wide&Deep)
          + FM: the sum over field pairs of <emb_i, emb_j>
"""

from cardinal.models.wide_deep import WideDeep


class DeepFM(WideDeep):
    def forward(self, dense, emb, wide):
        return super().forward(dense, emb, wide) + self.second_order(emb)

    def second_order(self, emb):
        """(B,): the sum over field pairs of <emb_i, emb_j>, in O(fields x dim)."""
        total = emb.sum(1)
        return 0.5 * (total * total - (emb * emb).sum(1)).sum(1)
