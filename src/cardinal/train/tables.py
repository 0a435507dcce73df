"""The embedding tables a recipe needs, derived the same way by trainers and servers.

One table ``emb`` for all sparse fields (``embedding.shared``, ids never collide across
fields) or one per field; each row is ``dim`` values (a table's own with ``embedding.dims``, whose
fields the dense side projects to ``dim``: ``models/projection.py``), plus one first-order weight
for models with a wide part (DeepFM, Wide&Deep), so a step needs one pull and one push per table;
the weight is the table's ``wide`` column, whose state a row-wise optimizer keeps apart from the
values' (``optim/base.py``). With ``train.baseline = "lr"`` each table has a twin ``lr_<name>`` of
one weight per id: the logistic-regression baseline trained on the same batches, on the same
servers. With ``compression.fiited.chunks > 1`` the model's tables keep their rows in chunks
(``embedding/formats/chunked.py``), the wide part's weight after them, never freed; the
baseline's stay whole. With ``compression.saec.ratio`` the model's tables are clustered at
``compression.saec.at`` (``embedding/clustered_table.py``), each id's field its bits from
``field_shift`` up; the baseline's stay whole too.
``plan_inputs`` is what the sharding planner reads of a recipe (``cardinal/planner``).
"""

from functools import partial

from cardinal.embedding import TableConfig
from cardinal.embedding.table_config import SaecSpec
from cardinal.model_traits import FIELD_SHIFT, MODELS, SPARSE_FIELDS  # not cardinal.models nor the readers: servers need no torch
from cardinal.planner.inputs import PlanInputs
from cardinal.ps import StoreConfig
from cardinal.recipe import Recipe
from cardinal.recipe.data import DataConfig


def sparse_fields(recipe: Recipe) -> list[str]:
    return list(SPARSE_FIELDS["movielens" if recipe.data.format == "movielens" else "criteo"])


def row_width(recipe: Recipe, table: str, model: str | None = None) -> int:
    """The table's dim embedding values (models that use them) + 1 first-order weight (models with a wide part)."""
    cls = MODELS[model or recipe.model["name"]]
    return (table_dim(recipe, table) if cls.uses_embedding else 0) + (1 if cls.uses_wide else 0)


def wide(recipe: Recipe) -> dict[str, int]:
    """model table -> its wide columns (``TableConfig.wide``): 1 where a row holds values and a first-order
    weight (DeepFM, Wide&Deep), else 0; a baseline table's one weight is a whole row (0, not named)."""
    cls = MODELS[recipe.model["name"]]
    return {t: int(cls.uses_wide and cls.uses_embedding) for t in set(features(recipe).values())}


def table_dim(recipe: Recipe, table: str) -> int:
    """A model table's embedding dim: its own (``embedding.dims``), else ``embedding.dim``."""
    return recipe.embedding.dims.get(table, recipe.embedding.dim)


def table_dims(recipe: Recipe) -> dict[str, int]:
    """model table -> its embedding dim."""
    return {t: table_dim(recipe, t) for t in sorted(set(features(recipe).values()))}


def baseline(recipe: Recipe) -> bool:
    """Whether the run trains the `lr` baseline beside its model (not when the model is `lr` itself)."""
    return recipe.train.baseline == "lr" and recipe.model["name"] != "lr"


def baseline_features(recipe: Recipe) -> dict[str, str]:
    """sparse field -> the baseline's table: ``lr_`` + the model's table, one weight per id."""
    return {f: f"lr_{t}" for f, t in features(recipe).items()}


def field_shift(recipe: Recipe) -> int:
    """The bit an id's field starts at: movielens ids are (field << 40) | value, Criteo-layout ones << 32."""
    return FIELD_SHIFT["movielens" if recipe.data.format == "movielens" else "criteo"]


def features(recipe: Recipe) -> dict[str, str]:
    """sparse field -> table name: ``emb``, or the field's own (``embedding.field_tables`` may name another)."""
    fields, named = sparse_fields(recipe), recipe.embedding.field_tables
    unknown = sorted(set(named) - set(fields))
    if unknown:
        raise ValueError(f"embedding.field_tables names {unknown[0]!r}, not a sparse field of this data; its fields "
                         f"are {fields}")
    return {f: "emb" if recipe.embedding.shared else named.get(f, f) for f in fields}


def store_config(recipe: Recipe) -> StoreConfig:
    e, comp, memory = recipe.embedding, recipe.compression, recipe.ps.memory
    fiited, saec = comp.fiited, comp.saec
    widths = {n: row_width(recipe, n) for n in features(recipe).values()}
    _check_named("embedding.dims", e.dims, widths, "" if not e.shared else
                 " (embedding.shared = true: every field reads table 'emb'; set embedding.shared = false for "
                 "a table per field)")
    if baseline(recipe):
        widths |= {n: row_width(recipe, n, "lr") for n in baseline_features(recipe).values()}
    _check_named("ps.memory.admission.tables", memory.admission.tables, widths)
    _check_named("compression.table_storage", comp.table_storage, widths)
    admission = {}
    for name in widths:  # a baseline table lr_X admits as its model table X does, unless named itself
        twin = name.removeprefix("lr_") if baseline(recipe) and name not in memory.admission.tables else name
        spec = memory.admission.for_table(twin if twin in widths else name)
        if spec.policy != "none":
            admission[name] = spec
    twins = set(baseline_features(recipe).values()) if baseline(recipe) else set()  # the baseline stays exact
    storage = {n: comp.table_storage.get(n, "fp32" if n in twins else comp.storage) for n in widths}
    cls = MODELS[recipe.model["name"]]
    if e.dims and not cls.uses_embedding:
        raise ValueError(f"embedding.dims: model {recipe.model['name']!r} has no embedding values (its rows hold one "
                         "weight); drop embedding.dims")
    if fiited.chunks > 1 and not cls.uses_embedding:
        raise ValueError(f"compression.fiited.chunks = {fiited.chunks}: model {recipe.model['name']!r} has no "
                         "embedding values to chunk (its rows hold one weight); set compression.fiited.chunks = 1")
    model_tables = set(features(recipe).values()) if fiited.chunks > 1 else set()
    chunked = {n: (fiited.chunks, fiited.target, int(cls.uses_wide)) if n in model_tables else (1, 1.0, 0)
               for n in widths}
    wide_of = wide(recipe)
    return StoreConfig(tuple(TableConfig(n, w, e.init_scale, e.seed, storage[n], *chunked[n], wide=wide_of.get(n, 0))
                             for n, w in sorted(widths.items())),
                       dict(recipe.sparse_optimizer), admission, memory.eviction, fiited.every,
                       {n: SaecSpec(saec.ratio, saec.at, field_shift(recipe))
                        for n in sorted(set(features(recipe).values()))} if saec.ratio else {})


def plan_inputs(recipe: Recipe) -> PlanInputs:
    """What the planner reads of the recipe: its [plan], a server's budget, its tables, each table's fields,
    its data."""
    fields: dict[str, list[str]] = {}
    for field, table in features(recipe).items():
        fields.setdefault(table, []).append(field)
    if baseline(recipe):
        for field, table in baseline_features(recipe).items():
            fields.setdefault(table, []).append(field)
    return PlanInputs(recipe.plan, recipe.ps.memory.budget_bytes(), store_config(recipe), fields,
                      recipe.compression.hash_buckets, recipe.data.batch_size,
                      partial(_readers, recipe.data, recipe.train.seed))


def _readers(data: DataConfig, seed: int, progress: bool = True) -> tuple:
    from cardinal.train.readers import make_readers  # torch: a server reads no data, and imports none

    return make_readers(data, seed, progress=progress)


def _check_named(key: str, named: dict, tables: dict, hint: str = "") -> None:
    unknown = sorted(set(named) - set(tables))
    if unknown:
        raise ValueError(f"{key} names {unknown[0]!r}, not a table of this recipe; its tables are "
                         f"{sorted(tables)}{hint}")
