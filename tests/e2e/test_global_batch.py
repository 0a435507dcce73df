"""The recipe defines the math, the cluster only the speed: W workers on a global batch train the
model one process trains (sync: servers combine each step's pushes), and async workers keep to
the staleness bound. Real processes through ``cardinal launch``, bounded in time."""

import pytest

from helpers.launch import STEPS, embedded, largest_difference, launched, leftovers

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`


@pytest.mark.timeout(600)
@pytest.mark.parametrize("servers,workers", [(2, 2), (1, 3)])
def test_sync_workers_on_a_global_batch_train_the_embedded_model(tmp_path, servers, workers):
    """Same data per step, one combined update per step: equal to one process up to the order of
    float additions (each worker sums its share, the server sums the shares; DDP sums the dense
    parts). After 12 steps the weights differ by float rounding only (< 1e-5; the values are ~1e-2)."""
    sets = ['embedding.consistency="sync"', *STEPS]
    alone = embedded(tmp_path, *sets)
    together = launched(tmp_path, servers, workers, *sets)
    assert together[0]["workers"] == workers and together[0]["steps"] == alone[0]["steps"] == 12
    assert together[0]["samples"] == alone[0]["samples"]
    dense, rows = largest_difference(alone, together)
    assert dense < 1e-5 and rows < 1e-5, (dense, rows)
    assert abs(together[0]["eval_auc"] - alone[0]["eval_auc"]) < 1e-4
    assert together[0]["staleness_p99"] == 0
    assert leftovers(tmp_path) == []


@pytest.mark.timeout(400)
def test_async_workers_keep_the_staleness_bound_and_report_it(tmp_path):
    sets = ['embedding.consistency="async"', "embedding.staleness=1", 'embedding.compensation="lr"', *STEPS]
    alone = embedded(tmp_path, *sets)
    together = launched(tmp_path, 2, 2, *sets)
    assert together[0]["steps"] == 12 and together[0]["samples"] == alone[0]["samples"]
    assert 1 <= together[0]["staleness_p50"] <= together[0]["staleness_p99"] <= 2  # bound k = 1, plus the prefetch
    assert abs(together[0]["eval_auc"] - alone[0]["eval_auc"]) < 0.02  # close, not equal: pushes apply as they come
    assert leftovers(tmp_path) == []
