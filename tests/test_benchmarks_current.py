"""Benchmarks run on demand, never in the suite, so a moved module or a renamed recipe key would
break them unseen until someone needs a figure: every benchmark imports (its ``main`` not run),
and every recipe key a benchmark or a doc page writes (``section.key=``) exists."""

import importlib
import re
import sys
from pathlib import Path

import pytest

from cardinal.recipe import load
from cardinal.recipe.moved import MOVED, MOVED_SECTIONS
from helpers.recipes import unknown

ROOT = Path(__file__).resolve().parents[1]
PEER_RUNNERS = {"peers_deepctr.py"}  # run in a peer library's own environment: tests/test_peers_bench.py checks them
BENCHMARKS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if p.name not in PEER_RUNNERS)
KEY = re.compile(r"""(?:^|[\s"'=\[,(])((?:[a-z_]+\.)+[a-z_]+)=(?!=)""")


def written_keys(text: str) -> set[str]:
    return {k for k in KEY.findall(text) if k.split(".")[0] in SECTIONS}


SECTIONS = set(load(None, []).to_dict()) | set(MOVED_SECTIONS)  # the old ones too: [admission]


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_imports(path, monkeypatch):
    monkeypatch.syspath_prepend(str(path.parent))
    name = f"_bench_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)


def test_every_recipe_key_benchmarks_and_docs_write_exists():
    recipe = load(None, []).to_dict()
    texts = {p: p.read_text() for p in [*BENCHMARKS, *(ROOT / "benchmarks").glob("*.sh"),
                                        *(ROOT / "docs").glob("*.md"), ROOT / "README.md"]}
    bad = sorted({(p.relative_to(ROOT).as_posix(), k) for p, t in texts.items() for k in written_keys(t)
                  if unknown(k, recipe)})
    assert bad == [], f"recipe keys that do not exist: {bad}"


def test_the_check_sees_a_renamed_key():
    recipe = load(None, []).to_dict()
    assert written_keys('--set "train.steps=3" ["consistency.mode=sync"]') == {
        "train.steps", "consistency.mode"}
    assert unknown("train.stepz", recipe) and unknown("embedding.dim.x", recipe)
    assert not unknown("model.hidden", recipe) and not unknown("data.synthetic.rows", recipe)
