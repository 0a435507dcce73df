"""``[consistency]`` holds a sub-table per mode with only what that mode reads (issue 26 item 4):
a knob the run would ignore is an error that names it and the mode, at load for a mode written
out and where "auto" resolves (servers or several workers: sync, else async)."""

import pytest

from cardinal.recipe import load
from cardinal.recipe.consistency import AsyncConfig, ConsistencyConfig, GeoConfig, SyncConfig


@pytest.mark.parametrize("mode, sets, says", [
    ("sync", ["consistency.async.staleness=2"], "consistency.async.staleness = 2 is read in async mode only"),
    ("sync", ['consistency.async.compensation="lr"'], "consistency.async.compensation = 'lr' is read in async"),
    ("sync", ["consistency.geo.interval=8"], "consistency.geo.interval = 8 is read in geo mode only"),
    ("async", ["consistency.sync.combine=false"], "consistency.sync.combine = False is read in sync mode only"),
    ("geo", ["consistency.async.combine=false"], "consistency.async.combine = False is read in async mode only"),
    ("geo", ["consistency.max_in_flight=8"], "consistency.max_in_flight bounds the pushes in flight in sync and async"),
    ("auto", ["consistency.geo.interval=8"], "consistency.geo.interval = 8 is read in geo mode only"),
])
def test_a_knob_of_another_mode_is_refused(mode, sets, says):
    with pytest.raises(ValueError, match=says):
        load(None, [f'consistency.mode="{mode}"', *sets])


def test_each_mode_takes_its_own_knobs():
    assert load(None, ['consistency.mode="async"', "consistency.async.staleness=2",
                       'consistency.async.compensation="lr"']).consistency.async_ == AsyncConfig(2, True, "lr")
    sync = load(None, ['consistency.mode="sync"', "consistency.sync.combine=false"]).consistency.sync
    assert sync == SyncConfig(False)
    assert load(None, ['consistency.mode="geo"', "consistency.geo.interval=8"]).consistency.geo == GeoConfig(8)
    load(None, ['consistency.mode="sync"', "consistency.async.staleness=1"])  # a default is no knob set


def test_auto_takes_both_knobs_and_refuses_the_one_it_does_not_resolve_to():
    c = ConsistencyConfig(async_=AsyncConfig(staleness=2))
    assert c.resolve(distributed=False) == "async"
    with pytest.raises(ValueError, match='consistency.async.staleness = 2 is read in async mode only, and '
                                         'consistency.mode = "auto" is \'sync\' in this job'):
        c.resolve(distributed=True)
    c = ConsistencyConfig(sync=SyncConfig(combine=False))
    assert c.resolve(distributed=True) == "sync"
    with pytest.raises(ValueError, match="set consistency.mode = 'sync'"):
        c.resolve(distributed=False)
