"""The shipped movielens recipe's fields (all but the user) read one table, "emb": the same model, bit
for bit, as a table a field (`embedding.field_tables = {}`), since a field's ids never collide with
another's ((field << 40) | value) and a row starts from (seed, id) whichever table holds it."""

import numpy as np
import pytest
import torch

from cardinal.recipe import load
from cardinal.train import Trainer, tables
from helpers.movielens_copy import write_movielens

pytestmark = pytest.mark.slow  # whole runs: outside `pytest -m "not slow"`


def test_the_recipes_grouped_table_trains_the_model_a_table_a_field_trains(tmp_path):
    folder = write_movielens(tmp_path / "movielens", users=200, movies=300, ratings=10_000)
    runs = {}
    for name, sets in (("grouped", []), ("by_field", ["embedding.field_tables={}"])):
        recipe = load("movielens", [f'data.train="{folder}"', *sets])
        trainer = Trainer(recipe, tmp_path / name, progress=False)
        runs[name] = (trainer, trainer.fit(), tables.features(recipe))
    (grouped, g_summary, g_tables), (by_field, f_summary, f_tables) = runs["grouped"], runs["by_field"]
    assert set(g_tables.values()) == {"emb", "user"} and len(set(f_tables.values())) == len(f_tables)

    for key in ("eval_auc", "eval_logloss", "baseline_lr_auc", "baseline_lr_logloss"):
        assert g_summary[key] == f_summary[key], key
    g_dense, f_dense = grouped.model.state_dict(), by_field.model.state_dict()
    assert g_dense.keys() == f_dense.keys() and all(torch.equal(g_dense[k], f_dense[k]) for k in g_dense)
    seen = {f: np.unique(np.concatenate([b.sparse[f].values for b in grouped.train_data])) for f in f_tables}
    for field, ids in seen.items():  # every row each field trained, read from both layouts
        for prefix in ("", "lr_"):
            a = grouped.client.pull(prefix + g_tables[field], ids, create=False).wait()
            b = by_field.client.pull(prefix + f_tables[field], ids, create=False).wait()
            assert np.array_equal(a, b), (prefix, field)
    assert sum(len(ids) for f, ids in seen.items() if f != "user") > 0
