"""The shipped movielens recipe reaches its target on the time split (issue 10: >= 0.69 eval AUC).

Trains the recipe as shipped (only data.train points at the data) for its one epoch. On the
shared copy of ml-latest-small, about 80 steps (seconds), the target is issue 10's; without the
history fields the same recipe lands at 0.672 (benchmarks/movielens.py). A clone without the
shared copy trains on a MovieLens folder the test writes (``movielens_copy.py``: the real
format, made-up ratings with a planted signal; 8 steps), where the recipe reaches 0.841 (one
step: 0.712, untrained: 0.472), so its target there is 0.80.
"""

import pytest

from cardinal.recipe import load
from cardinal.train import Trainer
from helpers.movielens_copy import SHARED, write_movielens

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`


def test_the_shipped_recipe_reaches_its_target_on_the_time_split(tmp_path):
    real = SHARED.is_dir()
    folder = SHARED if real else write_movielens(tmp_path / "movielens", users=200, movies=300, ratings=10_000)
    recipe = load("movielens", [f'data.train="{folder}"'])
    summary = Trainer(recipe, tmp_path / "run", progress=False).fit()
    assert summary["eval_auc"] >= (0.69 if real else 0.80), (folder, summary["eval_auc"])
