"""Fields that read another field's table (``embedding.field_tables``): their ids share its rows,
one pull and one push a step for all of them; bad settings are refused by name, and a resume
cannot change them."""

import pytest

from cardinal.recipe import load
from cardinal.train import Trainer, tables
from cardinal.train.resume import resumed_recipe
from helpers.recipes import tiny_recipe

SHARED = ["embedding.shared=false", 'embedding.field_tables={C2="C1", C3="C1", C9="hot", C10="hot"}']


def test_named_fields_read_the_table_named_and_the_others_their_own():
    r = load("criteo_synthetic", SHARED)
    f = tables.features(r)
    assert f["C1"] == f["C2"] == f["C3"] == "C1" and f["C9"] == f["C10"] == "hot" and f["C4"] == "C4"
    names = [t.name for t in tables.store_config(r).tables]
    assert "C2" not in names and "C3" not in names and "hot" in names and "lr_hot" in names and len(names) == 2 * 23


@pytest.mark.parametrize("sets, message", [
    (['embedding.field_tables={C2="C1"}'], "needs embedding.shared = false"),
    (["embedding.shared=false", 'embedding.field_tables={C99="C1"}'], "'C99', not a sparse field"),
    (["embedding.shared=false", 'embedding.field_tables={C2="a b"}'], "maps fields to the table"),
    (["embedding.shared=false", "embedding.field_tables={C2=3}"], "maps fields to the table"),
])
def test_bad_field_tables_are_refused_by_name(sets, message):
    with pytest.raises(ValueError, match=message):
        tables.store_config(load("criteo_synthetic", sets))


@pytest.mark.slow
def test_a_run_trains_the_shared_table_once_a_step_and_a_resume_cannot_change_it(tmp_path):
    r = tiny_recipe(tmp_path, "ps.shards=2", *SHARED, "train.steps=4")
    trainer = Trainer(r, tmp_path / "run", progress=False)
    try:
        trainer.fit()
        held = {name for st in trainer.client.stats() for name in st["tables"]}
        assert "hot" in held and "C9" not in held and "C2" not in held
        ids = {name: sum(st["tables"][name]["rows"] for st in trainer.client.stats()) for name in ("C1", "hot")}
        assert ids["C1"] > 0 and ids["hot"] > 0
    finally:
        trainer.close()
    with pytest.raises(ValueError, match="embedding.field_tables"):
        resumed_recipe(tmp_path / "run", ['embedding.field_tables={C2="C1"}'])
