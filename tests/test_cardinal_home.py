"""$CARDINAL_HOME: where generated and downloaded data go, found the same from any folder."""

import os
from pathlib import Path

import pytest

from cardinal import home
from cardinal.recipe import load
from cardinal.train import readers
from helpers.movielens_copy import write_movielens


def test_home_is_cardinal_home_else_the_xdg_cache_else_dot_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CARDINAL_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert home.home() == tmp_path / "h" and home.data_dir() == tmp_path / "h" / "data"
    monkeypatch.delenv("CARDINAL_HOME")
    assert home.home() == tmp_path / "xdg" / "cardinal"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert home.home() == tmp_path / "user" / ".cache" / "cardinal"


def test_the_test_session_never_uses_the_real_cache():
    """conftest points CARDINAL_HOME at a temporary folder for every test and the processes they start."""
    real = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cardinal"
    assert os.environ.get("CARDINAL_HOME") and home.home() != real
    assert "pytest-of-" in str(home.home())


def test_generated_data_goes_to_cardinal_home_and_is_reused_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CARDINAL_HOME", str(tmp_path / "h"))
    sets = ["data.synthetic.rows=300", "data.synthetic.eval_rows=100", "data.synthetic.vocab=50"]
    monkeypatch.chdir((tmp_path / "one").mkdir() or tmp_path / "one")
    recipe = load(None, sets)
    assert recipe.data.cache_dir == str(tmp_path / "h" / "data")  # resolved when loaded: recipe.json records it
    readers.ensure_synthetic(recipe.data, progress=False)
    assert readers.synthetic_dir(recipe.data).parent == tmp_path / "h" / "data"
    assert list((tmp_path / "one").iterdir()) == []  # nothing in the current folder

    def regenerate(*args, **kwargs):
        raise AssertionError("generated again")

    monkeypatch.setattr(readers, "generate", regenerate)
    monkeypatch.chdir((tmp_path / "two").mkdir() or tmp_path / "two")
    assert readers.ensure_synthetic(load(None, sets).data, progress=False)["eval"]["teacher_auc"] > 0.5


def test_paths_may_start_with_cardinal_home_or_tilde(tmp_path, monkeypatch):
    monkeypatch.setenv("CARDINAL_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    d = load(None, ['data.format="criteo"', 'data.train=["$CARDINAL_HOME/a.tsv", "~/b.tsv"]',
                    'data.eval="rel/c.tsv"', 'data.cache_dir="~/cache"']).data
    assert d.train == [str(tmp_path / "h" / "a.tsv"), str(tmp_path / "user" / "b.tsv")]
    assert d.eval == ["rel/c.tsv"] and d.cache_dir == str(tmp_path / "user" / "cache")


def test_the_movielens_recipe_reads_the_downloaded_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("CARDINAL_HOME", str(tmp_path / "h"))
    recipe = load("movielens")
    assert recipe.data.train == [str(tmp_path / "h" / "data" / "movielens-latest-small")]
    write_movielens(tmp_path / "h" / "data" / "movielens-latest-small", ratings=200)  # where the download goes
    train, evaluation, info = readers.make_readers(recipe.data, progress=False)
    assert len(train.labels) + len(evaluation.labels) == 200


def test_missing_movielens_names_both_fixes(tmp_path, monkeypatch):
    monkeypatch.setenv("CARDINAL_HOME", str(tmp_path / "h"))
    with pytest.raises(ValueError) as e:
        readers.make_readers(load("movielens").data, progress=False)
    msg = str(e.value)
    assert "holds no ratings.csv" in msg and "`cardinal data movielens`" in msg and '--set data.train="PATH"' in msg
    with pytest.raises(ValueError, match=f"`cardinal data movielens {tmp_path / 'elsewhere'}`"):
        readers.make_readers(load("movielens", [f'data.train="{tmp_path / "elsewhere"}"']).data, progress=False)
