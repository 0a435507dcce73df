"""Dense CTR models over pooled embeddings: DeepFM, DLRM, Wide&Deep."""

from cardinal.models.base import CTRModel, dropout_seed
from cardinal.models.deepfm import DeepFM
from cardinal.models.dlrm import DLRM
from cardinal.models.lr import LogisticRegression
from cardinal.models.wide_deep import WideDeep

MODELS: dict[str, type[CTRModel]] = {"deepfm": DeepFM, "dlrm": DLRM, "wide_deep": WideDeep, "lr": LogisticRegression}

__all__ = ["CTRModel", "dropout_seed", "DeepFM", "DLRM", "WideDeep", "LogisticRegression", "MODELS"]
