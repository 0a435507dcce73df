"""Fast errors (issue 10, item 6): help, version and a recipe error answer before torch, numba or
grpc is imported (they take seconds; the checks take milliseconds)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cardinal.recipe.model import MODEL_NAMES, SPARSE_OPTIMIZERS

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "numba", "grpc", "numpy", "pyarrow")

RUN = """
import json, sys
from cardinal import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in %r if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
""" % (HEAVY,)

CASES = {  # the command -> its exit code
    ("--help",): 0,
    ("--version",): 0,
    ("train", "--help"): 0,
    ("recipe", "list"): 0,
    ("train", "--set", "bad.key=1"): 2,
    ("train", "--set", "train.stepz=1"): 2,
    ("train", "--set", "train.steps=many"): 2,
    ("train", "--set", "data.synthetic.skew=0.5"): 2,
    ("train", "--set", 'model.name="deepfn"'): 2,
    ("train", "--set", 'sparse_optimizer.name="adagrd"'): 2,
    ("train", "--set", 'dense_optimizer.name="adamw"'): 2,
    ("train", "no_such_recipe"): 2,
    ("eval", "no_such_run"): 2,
    ("train", "--resume", "no_such_run"): 2,
}


@pytest.mark.parametrize("args", CASES, ids=" ".join)
def test_no_heavy_import_before_the_answer(args):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", RUN, *args], env=env, capture_output=True, text=True, timeout=60)
    result = json.loads(done.stderr.strip().splitlines()[-1])
    assert result == {"code": CASES[args], "heavy": []}, done.stderr


def test_the_cheap_name_lists_match_the_registries():
    from cardinal.models import MODELS
    from cardinal.optim import OPTIMIZERS

    assert sorted(MODEL_NAMES) == sorted(MODELS)
    assert sorted(SPARSE_OPTIMIZERS) == sorted(OPTIMIZERS)
