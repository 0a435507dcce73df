"""model.init_std: the hidden layers' weights drawn from N(0, init_std), the last layer as torch
draws it, nothing redrawn (every existing run bitwise as before) at the default 0."""

import pytest
import torch
from torch import nn

from cardinal.models import MODELS
from cardinal.models.base import mlp
from cardinal.recipe import load, parse_override

DEEP = sorted(set(MODELS) - {"lr"})  # the models with hidden layers
N_DENSE, N_FIELDS, DIM = 3, 4, 5


def linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def test_hidden_layers_are_drawn_at_init_std_and_the_last_is_torch_s():
    torch.manual_seed(0)
    layers = linears(mlp([300, 400, 200, 1], last_activation=False, init_std=0.01))
    for hidden in layers[:-1]:
        std = hidden.weight.std().item()
        assert 0.0097 < std < 0.0103, std  # 120k and 80k draws: within 3% of 0.01
        assert abs(hidden.weight.mean().item()) < 1e-4
    last = layers[-1]
    bound = 1 / 200 ** 0.5  # torch's default for a Linear of fan-in 200: U(-bound, bound)
    assert last.weight.abs().max().item() <= bound and last.weight.std().item() > 0.5 * bound


@pytest.mark.parametrize("name", DEEP)
def test_default_is_torch_s_init_bit_for_bit(name):
    torch.manual_seed(0)
    before = MODELS[name](N_DENSE, N_FIELDS, DIM).state_dict()
    state = torch.get_rng_state()
    torch.manual_seed(0)
    plain = MODELS[name](N_DENSE, N_FIELDS, DIM, init_std=0.0)
    assert all(torch.equal(v, plain.state_dict()[k]) for k, v in before.items())
    torch.manual_seed(0)
    small = MODELS[name](N_DENSE, N_FIELDS, DIM, init_std=1e-4)
    assert not torch.equal(torch.get_rng_state(), state)  # the redraw took draws...
    hidden = [lin for lin in linears(small) if lin.weight.abs().max().item() < 1e-3]
    assert hidden, "no layer drawn at init_std"  # ...into at least one hidden layer per model


def test_recipe_takes_init_std_and_names_bad_values():
    for name in DEEP:
        assert load(None, [f'model.name="{name}"', "model.init_std=0.0001"]).model["init_std"] == 0.0001
    for bad in ("1.0", "-0.1", "true", '"small"'):
        with pytest.raises(ValueError, match="model.init_std must be a number in"):
            MODELS["deepfm"](N_DENSE, N_FIELDS, DIM, init_std=parse_override(f"x={bad}")[1])
