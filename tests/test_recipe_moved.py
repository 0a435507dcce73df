"""The migration of issue 26 item 4: every key the recipe's sections by concern moved is refused,
from a recipe file, a ``--set`` or a run's saved recipe.json, naming its new place (exit 2, every
old key in one message); every new place is a key of the recipe; nothing is translated silently."""

import json
from dataclasses import fields, is_dataclass

import pytest

from cardinal import cli
from cardinal.recipe import Recipe, from_dict, load, load_dict
from cardinal.recipe.build import key
from cardinal.recipe.moved import MOVED, MOVED_SECTIONS


def section_of(path: str):
    """The dataclass at ``path`` ("ps.memory.admission") of a default recipe."""
    obj = Recipe()
    for part in path.split("."):
        obj = getattr(obj, next(f.name for f in fields(obj) if key(f) == part))
    assert is_dataclass(obj), path
    return obj


def is_key(path: str) -> bool:
    section, _, name = path.rpartition(".")
    return name in {key(f) for f in fields(section_of(section))}


@pytest.mark.parametrize("old", MOVED)
def test_every_old_key_is_refused_naming_its_new_place(old):
    new = MOVED[old]
    assert all(is_key(place) for place in new), f"{old} moved to {new}: not a key of the recipe"
    with pytest.raises(ValueError, match=f"{old} moved to {' or '.join(new)}"):
        load(None, [f"{old}=1"])


@pytest.mark.parametrize("old", MOVED_SECTIONS)
def test_the_old_admission_and_eviction_sections_are_refused_key_by_key(old):
    new = MOVED_SECTIONS[old]
    for f in fields(section_of(new)):
        with pytest.raises(ValueError, match=f"{old}.{f.name} moved to {new}.{f.name}"):
            load(None, [f"{old}.{f.name}=1"])
    with pytest.raises(ValueError, match=rf"\[{old}\] moved to \[{new}\]"):
        load_dict({old: {}})


def old_layout(recipe: Recipe) -> dict:
    """``recipe`` as a recipe.json written before the sections moved: each key at its old place."""
    raw = recipe.to_dict()
    for old, new in MOVED.items():
        section, name = old.split(".")
        *path, leaf = new[-1].split(".")  # a key read by two modes: the last (async) one
        node = raw
        for part in path:
            node = node[part]
        raw.setdefault(section, {})[name] = node[leaf]
    for old, new in MOVED_SECTIONS.items():
        *path, leaf = new.split(".")
        raw[old] = raw["ps"]["memory"][leaf]
    return raw


def test_an_old_recipe_json_is_refused_with_every_old_key_in_one_message(tmp_path, capsys):
    (tmp_path / "recipe.json").write_text(json.dumps(old_layout(load(None, []))))
    with pytest.raises(ValueError) as e:
        from_dict(json.loads((tmp_path / "recipe.json").read_text()))
    message = str(e.value)
    assert all(f"{old} moved to " in message for old in MOVED) and "\n" not in message
    for command in (["train", "--resume", str(tmp_path)], ["eval", str(tmp_path)],
                    ["recipe", "show", "--resume", str(tmp_path)]):
        assert cli.main(command) == 2
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and "embedding.saec_ratio moved to compression.saec.ratio" in err, command
    assert json.loads((tmp_path / "recipe.json").read_text()) == old_layout(load(None, []))  # left as it was


def test_an_old_recipe_file_is_refused_before_anything_runs(tmp_path, capsys):
    path = tmp_path / "old.toml"
    path.write_text('[embedding]\ndim = 8\nconsistency = "sync"\n\n[train]\nsteps = 3\neval_every = 2\n\n'
                    '[admission]\npolicy = "count"\n')
    assert cli.main(["train", str(path), "--set", f'train.run_dir="{tmp_path / "runs"}"']) == 2
    err = capsys.readouterr().err
    assert ("embedding.consistency moved to consistency.mode; train.eval_every moved to eval.every; "
            "admission.policy moved to ps.memory.admission.policy") in err
    assert not (tmp_path / "runs").exists()


def test_the_new_keys_hold_what_the_old_ones_held():
    r = load(None, ['consistency.mode="geo"', "consistency.geo.interval=8", "compression.saec.ratio=0",
                    "ps.limits.max_rows=500", 'ps.memory.budget="1MiB"', 'ps.memory.eviction.policy="lfu"',
                    'plan.layout="auto"', "plan.replicate={C5=10}", "eval.every=7", "checkpoint.keep=3",
                    "metrics.port=0"])
    assert (r.consistency.geo.interval, r.ps.limits.max_rows, r.ps.memory.budget_bytes()) == (8, 500, 1 << 20)
    assert (r.ps.memory.eviction.policy, r.plan.layout, r.plan.replicate) == ("lfu", "auto", {"C5": 10})
    assert (r.eval.every, r.checkpoint.keep, r.metrics.port) == (7, 3, 0)
    assert from_dict(r.to_dict()) == r and r.to_dict()["consistency"]["async"] == {
        "staleness": 1, "combine": True, "compensation": "none"}
