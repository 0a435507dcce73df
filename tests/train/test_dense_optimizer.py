"""The dense optimizer on the CPU takes torch's foreach path (``builder.dense_optimizer``), which
must give the bits of the per-parameter loop it replaced: a run's model, and so its AUC, stay the same."""

import copy

import pytest
import torch
from torch import nn

from cardinal.recipe import load
from cardinal.recipe.dense_optimizer import DENSE_OPTIMIZERS
from cardinal.train import builder


@pytest.mark.parametrize("name", sorted(DENSE_OPTIMIZERS))
@pytest.mark.parametrize("weight_decay", [0.0, 1e-4])
def test_foreach_on_cpu_gives_the_per_parameter_loops_bits(name, weight_decay):
    torch.manual_seed(0)
    # one weight past torch's grain size (32768 elements), so its ops run on several threads
    model = nn.Sequential(nn.Linear(300, 256), nn.ReLU(), nn.Linear(256, 1))
    loop_model = copy.deepcopy(model)
    recipe = load("criteo_synthetic", [f'dense_optimizer.name="{name}"', f"dense_optimizer.weight_decay={weight_decay}"])
    built = builder.dense_optimizer(recipe, model, 1)
    assert built.param_groups[0]["foreach"] is True
    loop = getattr(torch.optim, DENSE_OPTIMIZERS[name])(loop_model.parameters(), lr=built.param_groups[0]["lr"],
                                                         weight_decay=weight_decay, foreach=False)
    for step in range(50):
        for p, q in zip(model.parameters(), loop_model.parameters()):
            p.grad = torch.randn_like(p) * 10.0 ** (step % 8 - 6)  # tiny to large, as gradients go
            q.grad = p.grad.clone()
        for opt in (built, loop):
            opt.param_groups[0]["lr"] = 0.003 * (step + 1) / 50  # a schedule moves it every step
        built.step()
        loop.step()
    for p, q in zip(model.parameters(), loop_model.parameters()):
        assert torch.equal(p, q)
