"""Dense CTR models over pooled embeddings: DeepFM, DeepFwFM, DLRM, Wide&Deep."""

from cardinal.models.base import CTRModel, dropout_seed
from cardinal.models.deepfm import DeepFM
from cardinal.models.deepfwfm import DeepFwFM
from cardinal.models.dlrm import DLRM
from cardinal.models.lr import LogisticRegression
from cardinal.models.wide_deep import WideDeep

MODELS: dict[str, type[CTRModel]] = {"deepfm": DeepFM, "deepfwfm": DeepFwFM, "dlrm": DLRM, "wide_deep": WideDeep,
                                     "lr": LogisticRegression}

__all__ = ["CTRModel", "dropout_seed", "DeepFM", "DeepFwFM", "DLRM", "WideDeep", "LogisticRegression", "MODELS"]
