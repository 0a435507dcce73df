"""A killed server's disk tier directory is reclaimed by the next server, a live one's never (issue 25, item 9)."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import ShardStore, StoreConfig, StoreLimits
from cardinal.ps.server.process import READY
from helpers.processes import reaped

JOB, TOKEN = "reclaim-job", "s3cret"


def start_server(tmp_path) -> tuple[subprocess.Popen, str]:
    """A real ``cardinal server`` with a disk tier under tmp_path/tiers; (process, its READY line)."""
    cmd = [sys.executable, "-m", "cardinal.cli", "server", "--shard", "0/1", "--data-dir", str(tmp_path / "data"),
           *sum((["--set", s] for s in [f'ps.job="{JOB}"', "embedding.dim=4", "ps.memory.budget=4194304",
                                        "ps.memory.disk_budget=16777216",
                                        f'ps.memory.disk_dir="{tmp_path / "tiers"}"']), [])]
    proc = subprocess.Popen(cmd, env={**os.environ, "CARDINAL_TOKEN": TOKEN}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline()


def tier_dirs(tmp_path) -> set[str]:
    return {p.name for p in (tmp_path / "tiers").iterdir() if p.is_dir()}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_killed_servers_tier_directory_goes_when_the_next_starts_and_a_live_ones_stays(tmp_path):
    procs = []
    with reaped(procs):
        first, line = start_server(tmp_path)
        procs.append(first)
        assert line.startswith(READY), line + first.stderr.read()
        killed = tier_dirs(tmp_path)
        assert len(killed) == 1
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        assert tier_dirs(tmp_path) == killed  # nothing closed it: it stays until a server reclaims it

        second, line = start_server(tmp_path)
        procs.append(second)
        assert line.startswith(READY), line + second.stderr.read()
        live = tier_dirs(tmp_path)
        assert len(live) == 1 and not live & killed  # the killed one's is gone; the new server's is there

        third, line = start_server(tmp_path)  # beside a live server, on the same directories
        procs.append(third)
        assert line.startswith(READY), line + third.stderr.read()
        both = tier_dirs(tmp_path)
        assert live < both and len(both) == 2  # the live server's directory was not touched
        for p in (second, third):
            p.send_signal(signal.SIGTERM)
            assert p.wait(30) == 0
        assert tier_dirs(tmp_path) == set() and not list((tmp_path / "tiers").iterdir())  # locks gone too


def test_a_live_stores_tier_is_never_reclaimed_by_another_in_the_same_process(tmp_path):
    config = StoreConfig((TableConfig("t", 4, seed=1),))
    limits = StoreLimits(memory_budget=1 << 20, disk_budget=1 << 24)
    first = ShardStore(config, 0, 1, limits, str(tmp_path))
    try:
        ids = np.arange(40_000, dtype=np.int64)  # past the RAM budget: rows go to the first store's tier
        for step, part in enumerate(np.array_split(ids, 8), 1):
            first.pull("t", part, step=step)
        before = {i: first.pull("t", ids[i:i + 1], create=False).tobytes() for i in range(0, len(ids), 997)}
        assert first.stats()["disk_bytes"] > 0
        second = ShardStore(config, 0, 1, limits, str(tmp_path))
        try:
            assert {i: first.pull("t", ids[i:i + 1], create=False).tobytes() for i in before} == before
            assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2
        finally:
            second.close()
    finally:
        first.close()
    assert list(tmp_path.iterdir()) == []
