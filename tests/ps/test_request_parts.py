"""A request's part for one shard: the ids (and gradient rows) at its positions, in order; a part
that takes every row is the request's own arrays, not a copy (what one shard, or an embedded one,
is sent on every step)."""

import numpy as np

from cardinal.ps.transport.requests import PullRequest, PushRequest
from cardinal.ps.client.parts import parts_of
from cardinal.sharding.plan import ShardingPlan


def test_a_part_of_every_row_is_the_request_itself_and_a_smaller_part_a_copy_in_order():
    ids = np.array([9, 4, 7, 1], np.int64)
    grads = np.arange(8, dtype=np.float32).reshape(4, 2)
    counts = np.array([1, 2, 1, 3], np.int32)
    push = PushRequest("t", ids, grads, step=3, counts=counts)
    whole = push.part("t", np.arange(4), None, "r.0", None)
    assert whole.ids is ids and whole.grads is grads and whole.counts is counts
    some = push.part("t", np.array([1, 3]), None, "r.1", None)
    assert some.ids.tolist() == [4, 1] and some.grads.tolist() == [[2, 3], [6, 7]] and some.counts.tolist() == [2, 3]
    assert not np.shares_memory(some.grads, grads)
    columns = push.part("t-c1", np.arange(4), (1, 2), "r.2", None)  # a piece of the columns: its own rows
    assert columns.grads.tolist() == [[1], [3], [5], [7]]
    pull = PullRequest("t", ids, create=True, step=3)
    assert pull.part("t", np.arange(4), "r.3").ids is ids
    assert pull.part("t", np.array([0, 2]), "r.4").ids.tolist() == [9, 7]


def test_every_part_of_a_split_has_increasing_positions():
    """What lets a part of every row be the request itself: a stable split keeps each shard's ids in order."""
    ids = np.random.default_rng(0).integers(0, 2**62, 1000)
    for shards in (1, 3):
        parts = parts_of(ShardingPlan(shards), "t", ids)
        assert sorted(np.concatenate([p.pos for p in parts]).tolist()) == list(range(1000))
        assert all((np.diff(p.pos) > 0).all() for p in parts)
    assert [(p.shard, p.pos.tolist()) for p in parts_of(ShardingPlan(1), "t", ids[:5])] == [(0, [0, 1, 2, 3, 4])]
    assert [(p.shard, len(p.pos)) for p in parts_of(ShardingPlan(1), "t", ids[:0], every=True)] == [(0, 0)]

