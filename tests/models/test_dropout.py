"""Dropout in the deep models' MLPs: against a reference, off in eval mode, off (no draw) by default."""

import pytest
import torch

from cardinal.models import MODELS, dropout_seed
from cardinal.models.base import mlp
from cardinal.recipe import load, parse_override

DEEP = sorted(set(MODELS) - {"lr"})  # the models with hidden layers (lr has no dropout)

N_DENSE, N_FIELDS, DIM = 3, 4, 5


def inputs(batch=64):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(batch, N_DENSE, generator=g), torch.randn(batch, N_FIELDS, DIM, generator=g),
            torch.randn(batch, N_FIELDS, generator=g))


def pair(name, rate):
    """A model with dropout ``rate`` and one without, with the same weights."""
    torch.manual_seed(0)
    plain = MODELS[name](N_DENSE, N_FIELDS, DIM)
    torch.manual_seed(0)
    dropped = MODELS[name](N_DENSE, N_FIELDS, DIM, dropout=rate)
    return plain, dropped


def test_dropout_matches_reference():
    """One hidden layer: each output is either 0 or the plain ReLU output / (1 - p), and about
    a share p of the units that would be active are dropped."""
    p = 0.3
    torch.manual_seed(0)
    layer = mlp([8, 4000], dropout=p)
    x = torch.randn(50, 8)
    reference = torch.relu(layer[0](x))
    out = layer(x)
    active = reference > 0
    kept = out[active] != 0
    torch.testing.assert_close(out[active][kept], reference[active][kept] / (1 - p), rtol=1e-6, atol=0)
    assert (out[~active] == 0).all()
    share = 1 - kept.float().mean().item()
    n = int(active.sum())
    assert abs(share - p) < 4 * (p * (1 - p) / n) ** 0.5, (share, n)  # 4 sigma


@pytest.mark.parametrize("name", DEEP)
def test_eval_mode_turns_dropout_off_and_training_uses_it(name):
    plain, dropped = pair(name, 0.5)
    assert plain.state_dict().keys() == dropped.state_dict().keys()  # a checkpoint loads at any rate
    dense, emb, wide = inputs()
    plain.eval(), dropped.eval()
    assert torch.equal(plain(dense, emb, wide), dropped(dense, emb, wide))
    plain.train(), dropped.train()
    assert not torch.equal(plain(dense, emb, wide), dropped(dense, emb, wide))


@pytest.mark.parametrize("name", DEEP)
def test_default_draws_no_random_number(name):
    """model.dropout defaults to 0: training forward draws nothing, so every existing run is bitwise as before."""
    torch.manual_seed(0)
    model = MODELS[name](N_DENSE, N_FIELDS, DIM)
    dense, emb, wide = inputs()
    state = torch.get_rng_state()
    first = model(dense, emb, wide)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, model(dense, emb, wide))


def test_recipe_takes_dropout_for_each_deep_model_and_names_bad_rates():
    for name in DEEP:
        recipe = load(None, [f'model.name="{name}"', "model.dropout=0.2"])
        assert recipe.model["dropout"] == 0.2
    for bad in ("1.0", "-0.1", "true"):
        with pytest.raises(ValueError, match="model.dropout must be a number in"):
            MODELS["deepfm"](N_DENSE, N_FIELDS, DIM, dropout=parse_override(f"x={bad}")[1])


def test_dropout_seed_depends_on_seed_step_and_worker():
    seeds = {dropout_seed(s, k, w) for s in (0, 1) for k in (1, 2) for w in (0, 1)}
    assert len(seeds) == 8 and all(0 <= s < 2**63 for s in seeds)
    assert dropout_seed(3, 7, 0) == dropout_seed(3, 7, 0)
