"""A trained run's state, to compare two runs bit for bit: its tables' digests and its dense weights."""

import torch


def state(trainer, tables=("emb",)) -> tuple[dict, dict]:
    """({table: digest}, {name: dense tensor}) of a trainer, copied."""
    return ({t: trainer.client.digest(t) for t in tables},
            {k: v.clone() for k, v in trainer.model.state_dict().items()})


def same(a, b) -> bool:
    """Two states of ``state`` hold equal digests and bitwise equal dense tensors."""
    return a[0] == b[0] and a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])
