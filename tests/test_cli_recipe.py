"""``cardinal recipe show/list``, ``--version`` and ``train --help`` (issue 10, item 6): the resolved
recipe printed as TOML that reads back to the same recipe, every key with its meaning."""

import re
import tomllib
import warnings
from dataclasses import MISSING, fields, is_dataclass

import pytest

import cardinal
from cardinal import cli
from cardinal.optim import make_optimizer
from cardinal.recipe import Recipe, load, shipped
from cardinal.recipe.build import key
from cardinal.train.recipe_toml import to_toml

SECTIONS = [key(f) for f in fields(Recipe) if f.name not in ("model", "sparse_optimizer")]


def show(capsys, *args) -> str:
    capsys.readouterr()
    assert cli.main(["recipe", "show", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", shipped())
@pytest.mark.parametrize("sets", [[], ['model.name="dlrm"', "model.top=[32]", "embedding.pooling=\"mean\"",
                                       'sparse_optimizer.name="ftrl"', "data.strict=true", "train.steps=7"]])
def test_recipe_show_reads_back_to_the_same_recipe(name, sets, capsys, tmp_path):
    args = [name, *sum((["--set", s] for s in sets), [])]
    text = show(capsys, *args)
    (tmp_path / "shown.toml").write_text(text)
    shown, resolved = load(tmp_path / "shown.toml"), load(name, sets)
    for section in SECTIONS:
        assert getattr(shown, section) == getattr(resolved, section)
    # model and sparse optimizer are shown with their defaults filled in: the same settings
    assert {k: v for k, v in shown.model.items() if k in resolved.model} == resolved.model
    assert make_optimizer(shown.sparse_optimizer).config == make_optimizer(resolved.sparse_optimizer).config
    assert tomllib.loads(to_toml(shown)) == tomllib.loads(text)  # and shows the same again


def test_every_key_of_the_recipe_has_its_meaning(capsys):
    text = show(capsys)
    section, missing = None, []
    for line in text.splitlines():
        if m := re.match(r"^\[(.+)\]$", line):
            section = m.group(1).split(".")[0]
        elif section in SECTIONS and re.match(r"^\w+ = ", line) and "  # " not in line:
            missing.append(f"{section}.{line.split(' = ')[0]}")
    assert not missing, f"keys shown without their meaning (add metadata={{'help': ...}} to the field): {missing}"
    assert "[consistency]\nmode = \"auto\"  # sync: pulls see every earlier push" in text
    assert "# read in async mode only\n[consistency.async]\nstaleness = 1  # a pull sees" in text  # a sub-table's help


def test_every_field_of_every_section_has_its_help():
    def undocumented(cls, where):
        for f in fields(cls):
            if not f.metadata.get("help"):
                yield f"{where}{key(f)}"
            if f.default_factory is not MISSING and is_dataclass(made := f.default_factory()):
                yield from undocumented(type(made), f"{where}{key(f)}.")

    assert list(undocumented(Recipe, "")) == []


def test_the_model_and_sparse_optimizer_show_their_defaults(capsys):
    shown = tomllib.loads(show(capsys, "--set", 'model.name="dlrm"'))
    assert shown["model"] == {"name": "dlrm", "bottom": [64], "top": [256, 128], "dropout": 0.0, "init_std": 0.0}
    assert shown["sparse_optimizer"]["name"] == "adagrad" and shown["sparse_optimizer"]["eps"] == 1e-10


def test_unknown_keys_are_still_named(capsys):
    assert cli.main(["recipe", "show", "--set", "train.stepz=3"]) == 2
    assert "unknown setting train.stepz; [train] takes" in capsys.readouterr().err


def test_recipe_list_names_every_shipped_recipe(capsys):
    assert cli.main(["recipe", "list"]) == 0
    out = capsys.readouterr().out
    for name in shipped():
        assert re.search(rf"^{name}\s+\S", out, re.M)


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"cardinal {cardinal.__version__}"


def test_train_help_lists_the_recipes_and_where_keys_are_documented(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0
    assert f"a shipped recipe ({', '.join(shipped())})" in out
    assert "`cardinal recipe show [RECIPE]` prints every key" in out and "cardinal/recipe/" in out


def test_a_new_model_or_optimizer_name_warns_of_the_settings_it_leaves_behind():
    with pytest.warns(UserWarning, match=r"model settings of 'deepfm' are not carried over \(hidden=\[256, 128\]\)"):
        assert load("criteo_synthetic", ['model.name="deepfwfm"']).model == {"name": "deepfwfm"}
    with pytest.warns(UserWarning, match=r"sparse_optimizer settings of 'adagrad' .*lr=0.03"):
        load("criteo_synthetic", ['sparse_optimizer.name="sgd"'])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same name, settings given again, or none to leave: nothing to say
        load("criteo_synthetic", ['model.name="deepfm"'])
        assert load("criteo_synthetic", ['model.name="deepfwfm"', "model.hidden=[256,128]"]).model["hidden"] == [256, 128]
        load(None, ['model.name="dlrm"'])
