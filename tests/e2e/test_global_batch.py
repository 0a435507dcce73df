"""The recipe defines the math, the cluster only the speed: W workers on a global batch train the
model one process trains (sync: servers combine each step's pushes), and async workers keep to
the staleness bound, and a worker cache of staleness 0 changes no bit. Real processes through
``cardinal launch``, bounded in time."""

import pytest

from helpers.launch import CACHE, STEPS, embedded, equal_models, largest_difference, launched, leftovers

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`
SYNC = ['consistency.mode="sync"', *STEPS]


@pytest.fixture(scope="module")
def sync_2x2(tmp_path_factory):
    """Two servers and two sync workers, launched once for the tests that compare with it."""
    tmp_path = tmp_path_factory.mktemp("sync-2x2")
    run = launched(tmp_path, 2, 2, *SYNC)
    assert leftovers(tmp_path) == []
    return run


@pytest.mark.timeout(600)
@pytest.mark.parametrize("servers,workers", [(2, 2), (1, 3)])
def test_sync_workers_on_a_global_batch_train_the_embedded_model(tmp_path, request, servers, workers):
    """Same data per step, one combined update per step: equal to one process up to the order of
    float additions (each worker sums its share, the server sums the shares; DDP sums the dense
    parts). After 12 steps the weights differ by float rounding only (< 1e-5; the values are ~1e-2)."""
    alone = embedded(tmp_path, *SYNC)
    together = request.getfixturevalue("sync_2x2") if (servers, workers) == (2, 2) else \
        launched(tmp_path, servers, workers, *SYNC)
    assert together[0]["workers"] == workers and together[0]["steps"] == alone[0]["steps"] == 12
    assert together[0]["samples"] == alone[0]["samples"]
    dense, rows = largest_difference(alone, together)
    assert dense < 1e-5 and rows < 1e-5, (dense, rows)
    assert abs(together[0]["eval_auc"] - alone[0]["eval_auc"]) < 1e-4
    assert together[0]["staleness_p99"] == 0
    assert leftovers(tmp_path) == []


@pytest.mark.timeout(400)
def test_async_workers_keep_the_staleness_bound_and_report_it(tmp_path):
    sets = ['consistency.mode="async"', "consistency.async.staleness=1", 'consistency.async.compensation="lr"', *STEPS]
    alone = embedded(tmp_path, *sets)
    together = launched(tmp_path, 2, 2, *sets)
    assert together[0]["steps"] == 12 and together[0]["samples"] == alone[0]["samples"]
    assert 1 <= together[0]["staleness_p50"] <= together[0]["staleness_p99"] <= 2  # bound k = 1, plus the prefetch
    assert abs(together[0]["eval_auc"] - alone[0]["eval_auc"]) < 0.02  # close, not equal: pushes apply as they come
    assert leftovers(tmp_path) == []


@pytest.mark.timeout(600)
def test_staleness_zero_trains_bitwise_the_model_of_no_cache_with_two_workers(tmp_path, sync_2x2):
    cached = launched(tmp_path, 2, 2, *SYNC, *CACHE)
    assert "cache_emb_hit_rate_unique" in cached[0]
    equal_models(sync_2x2, cached)
    assert leftovers(tmp_path) == []
