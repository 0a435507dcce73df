"""What a server and a recipe check need to know of the models and data formats, without torch.

A ``cardinal server`` builds its tables from the recipe: each row's width depends on whether the
model reads embedding values and a first-order (wide) weight, and the tables on the data's
sparse fields. The models and readers themselves import torch (hundreds of MB before a row
exists, issue 25 item 5), so their traits are written here once more; tests/test_server_lean.py
keeps them equal to the classes (``cardinal.models``) and readers (``cardinal.data``).
"""

from dataclasses import dataclass

from cardinal.data.movielens_history import FIELDS as MOVIELENS_HISTORY


@dataclass(frozen=True)
class ModelTraits:
    uses_embedding: bool      # rows hold `dim` embedding values (False: the first-order weight only)
    uses_wide: bool           # rows hold one first-order weight (after the values)
    settings: tuple[str, ...]  # the keys of [model] besides `name` (the class's __init__ after n_dense, n_fields, dim)


MODELS = {
    "deepfm": ModelTraits(True, True, ("hidden", "dropout", "init_std")),
    "deepfwfm": ModelTraits(True, True, ("hidden", "dropout", "init_std")),
    "dlrm": ModelTraits(True, False, ("bottom", "top", "dropout", "init_std")),
    "lr": ModelTraits(False, True, ()),
    "wide_deep": ModelTraits(True, True, ("hidden", "dropout", "init_std")),
}

SPARSE_FIELDS = {  # data.format -> its sparse fields (every other format has Criteo's)
    "criteo": [f"C{i}" for i in range(1, 27)],
    "movielens": ["user", "movie", "genres", "year", *MOVIELENS_HISTORY],
}
FIELD_SHIFT = {"criteo": 32, "movielens": 40}  # an id is (field << shift) | value (criteo.CAT_LIMIT, movielens.ID_LIMIT)
