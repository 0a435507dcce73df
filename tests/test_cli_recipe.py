"""``cardinal recipe show/list``, ``--version`` and ``train --help`` (issue 10, item 6): the resolved
recipe printed as TOML that reads back to the same recipe, every key with its meaning."""

import re
import tomllib

import pytest

import cardinal
from cardinal import cli
from cardinal.train import config
from cardinal.optim import make_optimizer
from cardinal.train.recipe_toml import field_notes, to_toml

DATACLASS_SECTIONS = ["data", "data.synthetic", "embedding", "dense_optimizer", "ps", "train"]


def show(capsys, *args) -> str:
    capsys.readouterr()
    assert cli.main(["recipe", "show", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", config.shipped())
@pytest.mark.parametrize("sets", [[], ['model.name="dlrm"', "model.top=[32]", "embedding.pooling=\"mean\"",
                                       'sparse_optimizer.name="ftrl"', "data.strict=true", "train.steps=7"]])
def test_recipe_show_reads_back_to_the_same_recipe(name, sets, capsys, tmp_path):
    args = [name, *sum((["--set", s] for s in sets), [])]
    text = show(capsys, *args)
    (tmp_path / "shown.toml").write_text(text)
    shown, resolved = config.load(tmp_path / "shown.toml"), config.load(name, sets)
    for section in ("data", "embedding", "dense_optimizer", "ps", "train"):
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
            section = m.group(1)
        elif section in DATACLASS_SECTIONS and re.match(r"^\w+ = ", line) and "  # " not in line:
            missing.append(f"{section}.{line.split(' = ')[0]}")
    assert not missing, f"keys shown without their meaning (add a comment beside the field): {missing}"
    assert "consistency = \"auto\"  # sync: pulls see every earlier push" in text


def test_a_comment_on_its_own_line_goes_on_the_field_above_or_below():
    notes = field_notes(config.PSConfig)
    assert notes["token_file"] == "...carrying this token (or $CARDINAL_TOKEN)"
    assert notes["max_message_mb"].startswith("what one server accepts (cardinal server)")  # the lines above it
    assert notes["max_message_mb"].endswith("largest request or reply; clients split larger ones")
    assert notes["tls_ca"] == "what clients trust"  # not the comment block below it
    assert "the phases of a step take turns" in field_notes(config.TrainConfig)["threads"]


def test_the_model_and_sparse_optimizer_show_their_defaults(capsys):
    shown = tomllib.loads(show(capsys, "--set", 'model.name="dlrm"'))
    assert shown["model"] == {"name": "dlrm", "bottom": [64], "top": [256, 128], "dropout": 0.0}
    assert shown["sparse_optimizer"]["name"] == "adagrad" and shown["sparse_optimizer"]["eps"] == 1e-10


def test_unknown_keys_are_still_named(capsys):
    assert cli.main(["recipe", "show", "--set", "train.stepz=3"]) == 2
    assert "unknown setting train.stepz; [train] takes" in capsys.readouterr().err


def test_recipe_list_names_every_shipped_recipe(capsys):
    assert cli.main(["recipe", "list"]) == 0
    out = capsys.readouterr().out
    for name in config.shipped():
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
    assert f"a shipped recipe ({', '.join(config.shipped())})" in out
    assert "`cardinal recipe show [RECIPE]` prints every key" in out and "cardinal/train/config.py" in out
