"""A server process imports what a server needs and no more (issue 25, item 5): no torch, and an
idle ``cardinal server`` holds little of its own (``cardinal.ps.server.process_memory.FLOOR`` says the rest)."""

import inspect
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cardinal import model_traits
from cardinal.ps import connect
from cardinal.ps.server.process import READY
from helpers.processes import reaped

JOB, TOKEN = "lean-job", "s3cret"


def test_the_traits_a_server_reads_are_the_models_and_readers_own():
    from cardinal.data import criteo, movielens
    from cardinal.models import MODELS

    assert sorted(model_traits.MODELS) == sorted(MODELS)
    for name, cls in MODELS.items():
        traits = model_traits.MODELS[name]
        assert (traits.uses_embedding, traits.uses_wide) == (cls.uses_embedding, cls.uses_wide), name
        assert traits.settings == tuple(inspect.signature(cls.__init__).parameters)[4:], name
    assert model_traits.SPARSE_FIELDS == {"criteo": criteo.SPARSE, "movielens": movielens.SPARSE}
    assert model_traits.FIELD_SHIFT == {"criteo": criteo.CAT_LIMIT.bit_length() - 1,
                                        "movielens": movielens.ID_LIMIT.bit_length() - 1}


def mapped(pid: int) -> set[str]:
    """The files mapped into a process (its shared libraries among them)."""
    return {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if "/" in line}


IDLE_PRIVATE = 60_000_000  # an idle server's own memory (heap and anonymous maps): 43 MB measured


def private(pid: int) -> int:
    """Resident bytes of a process's heap and anonymous maps: its own memory. Its RSS adds the pages of
    the libraries it maps, which vary with the page cache (libllvmlite alone: 40 MB in a long-lived
    environment, 99 MB right after a fresh install; ps/server/process_memory.py), so they are not asserted."""
    total, own = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:
            own = len(head) == 5 or head[5].startswith("[")
        elif own and head and head[0] == "Rss:":
            total += int(head[1]) * 1024
    return total


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_server_process_holds_no_torch_and_stays_within_its_floor(tmp_path):
    cmd = [sys.executable, "-m", "cardinal.cli", "server", "--shard", "0/1", "--data-dir", str(tmp_path),
           "--set", f'ps.job="{JOB}"', "--set", "embedding.dim=4"]
    proc = subprocess.Popen(cmd, env={**os.environ, "CARDINAL_TOKEN": TOKEN}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with reaped([proc]):
        line = proc.stdout.readline()
        assert line.startswith(READY), line + proc.stderr.read()
        idle = private(proc.pid)
        port = dict(part.split("=", 1) for part in line.split()[1:])["port"]
        client = connect(servers=[f"127.0.0.1:{port}"], job=JOB, token=TOKEN, timeout=30)
        ids = np.arange(100, dtype=np.int64)
        rows = client.pull("emb", ids, step=1).wait()  # every kernel of a step loaded
        client.push("emb", ids, np.ones_like(rows), step=1).wait()
        torch = sorted(f for f in mapped(proc.pid) if "/torch/" in f)
        assert torch == [] and idle <= IDLE_PRIVATE, (torch[:3], idle)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
