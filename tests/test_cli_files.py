"""File lists that don't trap (issue 10, item 1): data.train, data.eval and ps.servers take a path,
a comma list, a TOML list, or the TOML list with its quotes stripped by bash, from --set and
from recipe files alike; a path holding a comma takes the quoted TOML list."""

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cardinal import cli
from cardinal.recipe import load
from cardinal.recipe.build import as_list

ROOT = Path(__file__).resolve().parents[1]
KEYS = ["data.train", "data.eval", "ps.servers"]
FORMS = {  # what the shell hands Cardinal -> the list meant
    "path": ("day_0.tsv", ["day_0.tsv"]),
    "comma list": ("day_0.tsv,day_1.tsv", ["day_0.tsv", "day_1.tsv"]),
    "comma list, spaces": ("day_0.tsv, day_1.tsv", ["day_0.tsv", "day_1.tsv"]),
    "TOML list": ('["day_0.tsv","day_1.tsv"]', ["day_0.tsv", "day_1.tsv"]),
    "TOML list, quotes stripped by bash": ("[day_0.tsv,day_1.tsv]", ["day_0.tsv", "day_1.tsv"]),
    "one-item list, quotes stripped": ("[day_0.tsv]", ["day_0.tsv"]),
    "a path holding a comma, TOML list": ('["a,b.tsv"]', ["a,b.tsv"]),
    "empty list": ("[]", []),
}


def shown(capsys, *sets) -> dict:
    """The recipe ``cardinal recipe show`` prints for these --set values, parsed."""
    capsys.readouterr()
    assert cli.main(["recipe", "show", *sum((["--set", s] for s in sets), [])]) == 0
    return tomllib.loads(capsys.readouterr().out)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("form", FORMS)
def test_every_form_of_a_file_list_through_the_cli(key, form, capsys):
    text, expected = FORMS[form]
    section, name = key.split(".")
    assert shown(capsys, f"{key}={text}")[section][name] == expected


@pytest.mark.parametrize("form", FORMS)
def test_every_form_of_a_file_list_in_a_recipe_file(form, tmp_path):
    text, expected = FORMS[form]
    value = json.dumps(text) if not text.startswith('["') and text != "[]" else text  # a TOML string, or the list
    path = tmp_path / "r.toml"
    path.write_text(f"[data]\ntrain = {value}\neval = {value}\n[ps]\nservers = {value}\n")
    recipe = load(path)
    assert recipe.data.train == recipe.data.eval == recipe.ps.servers == expected


def test_a_file_list_of_numbers_is_still_an_error(capsys):
    assert cli.main(["recipe", "show", "--set", "data.train=[1,2]"]) == 2
    assert "data.train must be list" in capsys.readouterr().err


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    from cardinal.data import SyntheticConfig, generate

    out = tmp_path_factory.mktemp("days")
    generate(out, SyntheticConfig(rows=1200, eval_rows=400, vocab=30, seed=1))
    (out / "train.tsv").rename(out / "day_0.tsv")
    (out / "eval.tsv").rename(out / "day_1.tsv")
    return out


@pytest.mark.slow
def test_a_comma_list_trains_on_every_file(tmp_path, days):
    """Both files of a comma list are read: one epoch is the rows of both (1200 + 400)."""
    runs = tmp_path / "runs"
    sets = ['data.format="criteo"', f"data.train={days / 'day_0.tsv'},{days / 'day_1.tsv'}",
            f"data.eval={days / 'day_1.tsv'}", "data.batch_size=400", "model.hidden=[8]", "embedding.dim=4",
            f'train.run_dir="{runs}"']
    assert cli.main(["train", *sum((["--set", s] for s in sets), [])]) == 0
    (run,) = runs.iterdir()
    assert json.loads((run / "summary.json").read_text())["samples"] == 1600


def readme_file_list_line() -> str:
    """The documented command that trains on a user's files, as printed (read from the README and
    docs/*.md, where the manual moved)."""
    text = "\n".join(page.read_text() for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    lines = [line.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)
             for line in block.splitlines()]
    found = [line for line in lines if line.startswith("cardinal train") and "data.train=" in line]
    assert found, "the README and docs lost their command that trains on a user's files"
    return found[0]


@pytest.mark.slow
def test_the_readmes_file_list_command_works_in_bash(tmp_path, days):
    """The documented line (docs/recipes.md), run by bash exactly as printed, in a folder holding the
    files it names."""
    line = readme_file_list_line()
    for word in shlex.split(line):  # the files the line names, as bash would pass them
        if word.startswith(("data.train=", "data.eval=")):
            for name in as_list(word.split("=", 1)[1]):
                src = days / ("day_0.tsv" if word.startswith("data.train=") else "day_1.tsv")
                (tmp_path / name).write_bytes(src.read_bytes())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cardinal").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cardinal.cli "$@"\n')
    (bin_dir / "cardinal").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
    assert re.search(r"^AUC 0\.\d+", done.stdout, re.M), done.stdout
