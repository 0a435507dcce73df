"""The embedding tables a recipe needs, derived the same way by trainers and servers.

One table ``emb`` for all sparse fields (``embedding.shared``, ids never collide across
fields) or one per field; each row is ``dim`` values, plus one first-order weight for models
with a wide part (DeepFM, Wide&Deep), so a step needs one pull and one push per table.
"""

from cardinal.data import criteo, movielens
from cardinal.embedding import TableConfig
from cardinal.models import MODELS
from cardinal.ps import StoreConfig
from cardinal.train.config import Recipe


def sparse_fields(recipe: Recipe) -> list[str]:
    return list(movielens.SPARSE if recipe.data.format == "movielens" else criteo.SPARSE)


def row_width(recipe: Recipe) -> int:
    return recipe.embedding.dim + (1 if MODELS[recipe.model["name"]].uses_wide else 0)


def features(recipe: Recipe) -> dict[str, str]:
    """sparse field -> table name."""
    return {f: "emb" if recipe.embedding.shared else f for f in sparse_fields(recipe)}


def store_config(recipe: Recipe) -> StoreConfig:
    e = recipe.embedding
    names = sorted(set(features(recipe).values()))
    return StoreConfig(tuple(TableConfig(n, row_width(recipe), e.init_scale, e.seed) for n in names),
                       dict(recipe.sparse_optimizer))
