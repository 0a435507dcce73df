"""Pooling strategies agree: torch ops against the compiled kernels, forward and backward."""

import numpy as np
import pytest
import torch

from cardinal.data import Bag
from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.worker import EmbeddingCollection
from cardinal.worker.pooling import CompiledPooling, TorchPooling


@pytest.mark.parametrize("mean", [False, True])
@pytest.mark.parametrize("batch,n_fields", [(10, 4), (1, 1), (7, 3), (0, 2)])
def test_torch_pooling_matches_the_compiled_kernels(mean, batch, n_fields, rng):
    rows = torch.randn(50, 6, requires_grad=True)
    sizes = rng.integers(0, 5, batch * n_fields)  # empty bags included, field-major
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    inverse = rng.integers(0, 50, offsets[-1]).astype(np.int64)
    compiled = CompiledPooling().pool(rows, inverse, offsets, n_fields, mean)
    ops = TorchPooling().pool(rows, inverse, offsets, n_fields, mean)
    assert ops.shape == compiled.shape == (batch, n_fields, 6)
    torch.testing.assert_close(ops, compiled)
    weights = torch.randn(batch, n_fields, 6)
    g_compiled, = torch.autograd.grad((compiled * weights).sum(), rows)
    g_ops, = torch.autograd.grad((ops * weights).sum(), rows)
    torch.testing.assert_close(g_ops, g_compiled)


def test_the_module_trains_the_same_with_either_strategy():
    config = StoreConfig((TableConfig("a", 4, init_scale=0.5),), {"name": "sgd", "lr": 1.0})
    sparse = {"x": Bag(np.array([1, 2, 2, 3], np.int64), np.array([0, 2, 2, 4], np.int64)),
              "y": Bag(np.array([3, 4], np.int64), np.array([0, 1, 2, 2], np.int64))}
    result = []
    for pooler in (CompiledPooling(), TorchPooling()):
        client = connect(config, 2)
        emb = EmbeddingCollection(client, {"x": "a", "y": "a"}, "mean", pooler=pooler)
        out = emb.stacked(sparse)
        (out * torch.arange(out.numel(), dtype=torch.float32).view(out.shape)).sum().backward()
        emb.flush()
        result.append((out.detach(), client.pull("a", np.arange(1, 5, dtype=np.int64), create=False).wait()))
    torch.testing.assert_close(result[1][0], result[0][0])
    np.testing.assert_allclose(result[1][1], result[0][1], rtol=1e-6)


def test_the_module_pools_with_the_strategy_it_is_given():
    class Counting(TorchPooling):
        calls = 0

        def pool(self, *args):
            Counting.calls += 1
            return super().pool(*args)

    config = StoreConfig((TableConfig("a", 4),), {"name": "sgd", "lr": 1.0})
    emb = EmbeddingCollection(connect(config, 1), {"x": "a"}, pooler=Counting())
    emb({"x": Bag(np.array([1, 2], np.int64), np.array([0, 1, 2], np.int64))})
    assert Counting.calls == 1
