"""Checkpoints by time, on by default: ``checkpoint.minutes`` by worker 0's clock (a fake
clock here: no test waits for wall-clock time)."""

import pytest

from cardinal.checkpoint import layout
from cardinal.recipe import load
from cardinal.recipe.checkpoint import CheckpointConfig
from cardinal.train import Trainer
from cardinal.train.checkpoint_clock import CheckpointClock
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`


class FakeClock:
    """Minutes pass only when a step asks: each call to ``now`` is ``step_s`` seconds later."""

    def __init__(self, step_s: float):
        self.t, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.t += self.step_s
        return self.t


def test_a_run_saves_every_checkpoint_minutes_by_default_on():
    assert CheckpointConfig().minutes == 10
    assert load(None, ["checkpoint.minutes=0.25"]).checkpoint.minutes == 0.25  # fractions too
    with pytest.raises(ValueError, match="checkpoint.minutes must be >= 0"):
        load(None, ["checkpoint.minutes=-1"])


@pytest.mark.parametrize("minutes,expected", [(0.5, [3, 6, 9, 10]), (0, [10])], ids=["every-half-minute", "off"])
def test_checkpoints_follow_the_clock(tmp_path, minutes, expected):
    recipe = tiny_recipe(tmp_path, "train.steps=10", "checkpoint.keep=100", f"checkpoint.minutes={minutes}")
    trainer = Trainer(recipe, tmp_path / "run", progress=False)
    # 10 s per look at the clock: restart (0), then due() at each step; due when 30 s passed, i.e.
    # at the 3rd look after a restart; a save restarts the clock (one more look)
    trainer.clock = CheckpointClock(minutes, leader=True, now=FakeClock(10.0))
    trainer.fit()
    assert layout.committed_steps(tmp_path / "run" / "checkpoints") == expected


def test_only_worker_0s_clock_decides():
    """Every worker adds its due() to the step's all-reduce: only the leader's may be 1, so the
    workers save at the same step whatever their own clocks say."""
    leader, other = CheckpointClock(1, True, FakeClock(120.0)), CheckpointClock(1, False, FakeClock(120.0))
    assert leader.due() == 1.0 and other.due() == 0.0
    leader.restart()
    assert leader.due() == 1.0  # 120 s after the restart
    assert CheckpointClock(0, True, FakeClock(1e9)).due() == 0.0  # 0: off
