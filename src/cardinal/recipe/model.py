"""``[model]`` and ``[sparse_optimizer]``: a name and that model's or optimizer's own settings
(a dict, checked against the model's settings and the optimizer's Config). The names alone are
listed here, checked before torch or numba is imported (tests/test_cli_fast.py keeps them equal
to cardinal.models.MODELS and cardinal.optim.OPTIMIZERS)."""

MODEL_NAMES = ("deepfm", "deepfwfm", "dlrm", "lr", "wide_deep")
SPARSE_OPTIMIZERS = ("adagrad", "adam", "ftrl", "rowwise_adagrad", "sgd")


def check_model(spec: dict) -> None:
    spec = dict(spec)
    name = spec.pop("name", None)
    if name not in MODEL_NAMES:
        raise ValueError(f"model.name must be one of {sorted(MODEL_NAMES)}, got {name!r}")
    from cardinal.model_traits import MODELS  # no torch: servers load recipes too

    params = list(MODELS[name].settings)
    for key in spec:
        if key not in params:
            raise ValueError(f"model {name!r} has no setting {key!r}; it takes {params}")
