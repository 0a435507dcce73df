"""The dense lr schedule (train/schedule.py): hand-computed values, the optimizer's groups, recipe errors."""

import math

import pytest
import torch

from cardinal.recipe import load
from cardinal.recipe.dense_optimizer import DenseOptimizerConfig
from cardinal.train.schedule import DenseSchedule, lr_factor


def test_warmup_then_linear_decay_by_hand():
    # the module docstring's example: base 0.01, warmup 2, linear to 0.1 x base at step 6
    got = [0.01 * lr_factor(s, 2, "linear", 0.1, 6) for s in range(1, 8)]
    want = [0.005, 0.01, 0.00775, 0.0055, 0.00325, 0.001, 0.001]  # past the total: stays at the floor
    assert got == pytest.approx(want, rel=1e-12, abs=0)


def test_cosine_by_hand():
    # no warmup, total 4, floor 0: 1, (1 + cos(pi/4)) / 2 ... at steps 0..4
    got = [lr_factor(s, 0, "cosine", 0.0, 4) for s in range(0, 5)]
    half = (1 + math.sqrt(0.5)) / 2
    assert got == pytest.approx([1.0, half, 0.5, 1 - half, 0.0], rel=1e-12, abs=1e-15)
    # with a floor of 0.2 the same curve is squeezed into [0.2, 1]
    assert lr_factor(2, 0, "cosine", 0.2, 4) == pytest.approx(0.2 + 0.8 * 0.5, rel=1e-12)
    # warmup 1 of total 3: step 1 is the warmup's top, decay runs over steps 2, 3
    assert [lr_factor(s, 1, "cosine", 0.0, 3) for s in (1, 2, 3)] == pytest.approx([1.0, 0.5, 0.0], abs=1e-15)


def test_warmup_alone_rises_linearly_then_holds():
    assert [lr_factor(s, 4) for s in range(1, 7)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert lr_factor(5) == 1.0  # everything off: the base lr


def test_schedule_sets_every_param_group_and_nothing_when_off():
    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    opt = torch.optim.Adam([{"params": params[:1]}, {"params": params[1:]}], lr=0.5)
    d = DenseOptimizerConfig(lr=0.01, warmup_steps=2, decay="linear", min_lr_ratio=0.1)
    DenseSchedule(d, 0.01, 6).apply(opt, 3)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.00775, 0.00775], rel=1e-12)
    off = DenseSchedule(DenseOptimizerConfig(), 0.01, 6)
    off.apply(opt, 1)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.00775, 0.00775], rel=1e-12)  # untouched


def test_decay_needs_a_known_total_and_recipe_values_are_checked():
    with pytest.raises(ValueError, match="needs the run's total steps"):
        DenseSchedule(DenseOptimizerConfig(decay="cosine"), 0.01, None)
    DenseSchedule(DenseOptimizerConfig(warmup_steps=10), 0.01, None)  # warmup alone needs no total
    for bad in ('dense_optimizer.decay="exp"', "dense_optimizer.warmup_steps=-1", "dense_optimizer.min_lr_ratio=1.5",
                "dense_optimizer.min_lr_ratio=nan"):
        with pytest.raises(ValueError, match="dense_optimizer: warmup_steps must be"):
            load(None, [bad])
