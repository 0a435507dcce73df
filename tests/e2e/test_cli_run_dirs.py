"""Unique run directories (issue 10, item 5): two ``cardinal train`` started in the same second
never share a directory; the second takes the readable name with a suffix."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cardinal import cli
from cardinal.train import run_dirs
from helpers.processes import reaped, succeeded

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

ROOT = Path(__file__).resolve().parents[2]


def test_a_name_taken_in_the_same_second_gets_a_suffix(tmp_path, monkeypatch):
    monkeypatch.setattr(run_dirs, "_timestamp", lambda: "20261122-101500")
    made = [run_dirs.new_run_dir(tmp_path / "runs", "criteo") for _ in range(3)]
    assert [p.name for p in made] == ["criteo-20261122-101500", "criteo-20261122-101500-2", "criteo-20261122-101500-3"]
    assert all(p.is_dir() for p in made)


def sets(small_tsv: Path, runs: Path) -> list[str]:
    values = ['data.format="criteo"', f"data.train={small_tsv / 'train.tsv'}", f"data.eval={small_tsv / 'eval.tsv'}",
              "data.batch_size=200", "data.eval_batch_size=400", "model.hidden=[8]", "embedding.dim=4",
              "metrics.log_every=1", f'train.run_dir="{runs}"']
    return sum((["--set", v] for v in values), [])


def check_one_run_each(runs: Path, n: int) -> None:
    dirs = sorted(runs.iterdir())
    assert len(dirs) == n
    for run in dirs:
        steps = [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
        assert steps == [1, 2, 3, 4, 5, 6]  # one run's metrics, not two interleaved
        assert json.loads((run / "summary.json").read_text())["steps"] == 6


def test_two_runs_in_the_same_second_get_two_directories(tmp_path, small_tsv, monkeypatch):
    monkeypatch.setattr(run_dirs, "_timestamp", lambda: "20261122-101500")
    runs = tmp_path / "runs"
    assert cli.main(["train", *sets(small_tsv, runs)]) == 0
    assert cli.main(["train", *sets(small_tsv, runs)]) == 0
    check_one_run_each(runs, 2)


# each process imports everything, says so, and is told when to start `cardinal train`: 50 ms into
# the same whole second of the clock, so their directory names collide (no hook in the code under test)
TOGETHER = """
import sys, time
import cardinal.train.trainer
from cardinal import cli
print("ready", flush=True)
start = float(sys.stdin.readline())
time.sleep(max(0.0, start - time.time()))
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_two_processes_started_together_get_two_directories(tmp_path, small_tsv):
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-c", TOGETHER, "train", *sets(small_tsv, runs)]
    procs = [subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    with reaped(procs):
        for p in procs:  # readline blocks; pytest-timeout bounds it, and a dead process gives ""
            assert p.stdout.readline().strip() == "ready", p.stderr.read()[-3000:]
        start = math.ceil(time.time()) + 1.05
        for p in procs:
            p.stdin.write(f"{start}\n")
            p.stdin.flush()
        succeeded(procs)
    check_one_run_each(runs, 2)


def test_a_run_that_cannot_start_leaves_no_empty_run_directory(tmp_path, capsys):
    """The first thing a new user may meet, data not found, is an error (exit 2), not also an empty
    run directory per attempt."""
    runs = tmp_path / "runs"
    code = cli.main(["train", "movielens", "--set", f'train.run_dir="{runs}"',
                     "--set", f'data.train="{tmp_path / "no-such-folder"}"'])
    assert code == 2 and "MovieLens data not found" in capsys.readouterr().err
    assert list(runs.iterdir()) == []
