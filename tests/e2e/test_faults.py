"""Training through a transport that drops, loses, duplicates, delays and reorders requests."""

import numpy as np
import pytest
import torch

from cardinal.ps import PSClient
from cardinal.ps.transport import TransientError
from cardinal.ps.transport.faulty import FaultyTransport
from cardinal.train import Trainer
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`


def recipe(tmp_path, *extra):
    return tiny_recipe(tmp_path, "ps.shards=3", "train.steps=8", 'consistency.mode="sync"', *extra)


def test_sync_training_through_faults_ends_bitwise_where_it_does_without_them(tmp_path):
    clean = Trainer(recipe(tmp_path), tmp_path / "clean", progress=False)
    clean.fit()
    chaos = Trainer(recipe(tmp_path), tmp_path / "chaos", progress=False)
    faulty = FaultyTransport(chaos.client.transport, seed=7, drop=0.15, lose_reply=0.15, duplicate=0.2)
    chaos.client = chaos.embedding.source.client = PSClient(faulty, retries=20)
    chaos.fit()
    assert min(faulty.injected.values()) > 0, faulty.injected
    assert chaos.client.digest("emb") == clean.client.digest("emb")
    for k, v in clean.model.state_dict().items():
        assert torch.equal(v, chaos.model.state_dict()[k]), k
    for store in faulty.inner.stores:
        store.check()


def test_a_request_that_keeps_failing_ends_in_an_error(tmp_path):
    trainer = Trainer(recipe(tmp_path), tmp_path / "run", progress=False)
    client = PSClient(FaultyTransport(trainer.client.transport, drop=1.0), retries=2)
    with pytest.raises(TransientError, match="pull from shard"):
        client.pull("emb", np.arange(10, dtype=np.int64)).wait()
