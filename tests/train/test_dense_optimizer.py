"""The dense optimizer on the CPU takes torch's fused kernel (``builder.dense_optimizer``): what the
per-parameter loop computes, to an ulp, and the same bits whatever the thread count (a run's model
must not depend on the cores it ran on)."""

import copy

import pytest
import torch
from torch import nn

from cardinal.recipe import load
from cardinal.recipe.dense_optimizer import DENSE_OPTIMIZERS
from cardinal.train import builder


@pytest.mark.parametrize("name", sorted(DENSE_OPTIMIZERS))
@pytest.mark.parametrize("weight_decay", [0.0, 1e-4])
def test_fused_on_cpu_is_the_per_parameter_loop_to_an_ulp(name, weight_decay):
    torch.manual_seed(0)
    # one weight past torch's grain size (32768 elements), so its ops run on several threads
    model = nn.Sequential(nn.Linear(300, 256), nn.ReLU(), nn.Linear(256, 1))
    loop_model = copy.deepcopy(model)
    recipe = load("criteo_synthetic", [f'dense_optimizer.name="{name}"', f"dense_optimizer.weight_decay={weight_decay}"])
    built = builder.dense_optimizer(recipe, model, 1)
    assert built.param_groups[0]["fused"] is True
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
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def trained(name: str, threads: int) -> list[torch.Tensor]:
    """A model after 30 steps of the recipe's dense optimizer ``name`` on ``threads`` threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(300, 257), nn.ReLU(), nn.Linear(257, 1))  # odd sizes: vector tails
        optimizer = builder.dense_optimizer(load("criteo_synthetic", [f'dense_optimizer.name="{name}"']), model, 1)
        grads = torch.Generator().manual_seed(1)
        for step in range(30):
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=grads) * 10.0 ** (step % 8 - 6)
            optimizer.step()
        return [p.detach().clone() for p in model.parameters()]
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("name", sorted(DENSE_OPTIMIZERS))
def test_fused_on_cpu_gives_the_same_bits_for_any_thread_count(name):
    one = trained(name, 1)
    for threads in (2, 3):
        assert all(torch.equal(a, b) for a, b in zip(one, trained(name, threads)))


@pytest.mark.parametrize("name", sorted(DENSE_OPTIMIZERS))
def test_a_checkpoint_saved_on_another_path_loads_onto_the_built_one(name):
    model = nn.Linear(4, 1)
    old = getattr(torch.optim, DENSE_OPTIMIZERS[name])(model.parameters(), lr=0.01, foreach=True)  # before fused
    model(torch.randn(2, 4)).sum().backward()
    old.step()
    built = builder.dense_optimizer(load("criteo_synthetic", [f'dense_optimizer.name="{name}"']), model, 1)
    builder.load_dense_state(built, old.state_dict())
    assert built.param_groups[0]["fused"] is True and not built.param_groups[0]["foreach"]
    assert built.param_groups[0]["lr"] == 0.01  # the rest is the checkpoint's (the caller sets lr and decay)
    built.step()
