"""Sparse optimizers applied by the servers to exactly the rows pushed.

    make_optimizer({"name": "adam", "lr": 1e-3})  ->  Adam(AdamConfig(lr=0.001, ...))
"""

from dataclasses import fields

from cardinal.optim.adagrad import Adagrad, AdagradConfig
from cardinal.optim.adam import Adam, AdamConfig
from cardinal.optim.base import OptimizerConfig, SparseOptimizer
from cardinal.optim.ftrl import FTRL, FTRLConfig
from cardinal.optim.rowwise_adagrad import RowWiseAdagrad, RowWiseAdagradConfig
from cardinal.optim.sgd import SGD, SGDConfig

OPTIMIZERS: dict[str, type[SparseOptimizer]] = {
    cls.name: cls for cls in (SGD, Adagrad, RowWiseAdagrad, Adam, FTRL)
}


def make_optimizer(spec: dict | SparseOptimizer) -> SparseOptimizer:
    """An optimizer from ``{"name": ..., **hyper_parameters}``; unknown names or keys are errors."""
    if isinstance(spec, SparseOptimizer):
        return spec
    spec = dict(spec)
    name = spec.pop("name", "rowwise_adagrad")
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    cls = OPTIMIZERS[name]
    allowed = {f.name for f in fields(cls.Config)}
    for key in spec:
        if key == "weight_decay" and "l2" in allowed:
            raise ValueError(f"optimizer {name!r}: sparse optimizers call weight decay 'l2' (lazy, on the rows "
                             f"a push touches; see cardinal/optim/l2.py): write l2 = ... instead of weight_decay")
        if key not in allowed:
            raise ValueError(f"optimizer {name!r} has no setting {key!r}; it takes {sorted(allowed)}")
    return cls(cls.Config(**spec))


__all__ = [
    "OPTIMIZERS", "make_optimizer", "SparseOptimizer", "OptimizerConfig",
    "SGD", "SGDConfig", "Adagrad", "AdagradConfig", "RowWiseAdagrad", "RowWiseAdagradConfig",
    "Adam", "AdamConfig", "FTRL", "FTRLConfig",
]
