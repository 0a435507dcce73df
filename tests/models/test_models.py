"""Models: shapes with and without dense features, and learning a planted signal end to end."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import binary_auroc

from cardinal.data.batch import single_hot
from cardinal.embedding import TableConfig
from cardinal.models import MODELS
from cardinal.ps import StoreConfig, connect
from cardinal.worker import EmbeddingCollection


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("n_dense", [0, 5])
def test_shapes(name, n_dense):
    model = MODELS[name](n_dense, 6, 8)
    emb, wide = torch.randn(32, 6, 8), torch.randn(32, 6)
    out = model(torch.randn(32, n_dense), emb, wide if model.uses_wide else None)
    assert out.shape == (32,)
    out.sum().backward()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(MODELS) - {"lr"}))  # lr: one weight per id cannot learn a pair's class
def test_learns_a_planted_signal_through_the_parameter_server(name):
    """Click iff the ids of fields 0 and 1 share a hidden class: needs the embeddings to learn."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    fields, dim = 3, 8
    tables = [TableConfig("emb", dim, init_scale=0.1)]
    model = MODELS[name](2, fields, dim, **({"hidden": [32]} if name != "dlrm" else {"top": [32]}))
    if model.uses_wide:
        tables.append(TableConfig("wide", 1, init_scale=0.0))
    client = connect(StoreConfig(tuple(tables), {"name": "adagrad", "lr": 0.1}), 2)
    names = [f"f{i}" for i in range(fields)]
    deep = EmbeddingCollection(client, {f: "emb" for f in names})
    wide = EmbeddingCollection(client, {f: "wide" for f in names}) if model.uses_wide else None
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def batch(n):
        ids = rng.integers(0, 40, (n, fields))
        labels = ((ids[:, 0] % 2) == (ids[:, 1] % 2)).astype(np.float32)
        sparse = {f: single_hot(ids[:, i] + (i << 32), np.ones(n, bool)) for i, f in enumerate(names)}
        return sparse, torch.randn(n, 2), torch.from_numpy(labels)

    def logits(sparse, dense):
        pooled = deep(sparse)
        emb = torch.stack([pooled[f] for f in names], 1)
        w = torch.cat([wide(sparse)[f] for f in names], 1) if wide else None
        return model(dense, emb, w)

    for _ in range(150):
        sparse, dense, labels = batch(256)
        loss = F.binary_cross_entropy_with_logits(logits(sparse, dense), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for m in (model, deep, *( [wide] if wide else [])):
        m.eval()
    sparse, dense, labels = batch(2000)
    with torch.no_grad():
        auc = binary_auroc(logits(sparse, dense), labels.long())
    assert auc > 0.9, f"{name} reached AUC {auc:.3f} on a signal it should learn"


def test_a_batch_of_one_example_is_normalised_by_the_running_statistics():
    """One example has no batch statistics: train mode then normalises it as eval mode does, and
    leaves the running statistics as they were, instead of failing at the data set's last line."""
    from cardinal.models.global_norm import GlobalBatchNorm

    norm = GlobalBatchNorm(3)
    norm(torch.randn(8, 3) * 4 + 1)  # running statistics away from their initial values
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    one = torch.randn(1, 3)
    out = norm(one)
    assert all(torch.equal(v, before[k]) for k, v in norm.state_dict().items())
    norm.eval()
    assert torch.equal(out, norm(one))
