"""``cardinal sweep``: every combination runs as its own ``cardinal train``, one table comes out,
a failed setting is a row with its error, and parallel children share the cores."""

import json
import os
from pathlib import Path

import pytest

from cardinal import cli
from cardinal.jobs import sweep
from cardinal.parallel import available_cores

ROOT = Path(__file__).resolve().parents[2]


def tiny(tmp_path) -> list[str]:
    """The default recipe shrunk to seconds (as conftest.tiny_recipe): 3,000 generated rows, 12 steps."""
    return [f'data.cache_dir="{tmp_path / "data"}"', "data.synthetic.rows=3000", "data.synthetic.eval_rows=1000",
            "data.synthetic.vocab=300", "data.batch_size=256", "data.eval_batch_size=1000", "model.hidden=[16]",
            "metrics.log_every=4"]


@pytest.fixture
def child_env(monkeypatch):
    """Children import this checkout's cardinal, however pytest was started."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))


def test_grid_values_split_on_commas_outside_brackets_and_quotes():
    assert sweep.split_values("0.1, 0.2") == ["0.1", "0.2"]
    assert sweep.split_values("[256,128],[64]") == ["[256,128]", "[64]"]
    assert sweep.split_values('"a,b",c') == ['"a,b"', "c"]
    assert sweep.parse_grid(["model.hidden=[256,128],[64]", "embedding.dim=8"]) == \
        {"model.hidden": ["[256,128]", "[64]"], "embedding.dim": ["8"]}


@pytest.mark.parametrize("grids, message", [
    ([], "needs at least one --grid"),
    (["embedding.dim"], "--grid takes section.key=v1,v2"),
    (["dim=8,16"], "--grid takes section.key=v1,v2"),
    (["embedding.dim=8,,16"], "has an empty value"),
    (["model.hidden=[256,128"], "unclosed bracket"),
    (["embedding.dim=8", "embedding.dim=16"], "is given twice"),
])
def test_a_bad_grid_is_an_error_that_says_what_to_write(grids, message):
    with pytest.raises(ValueError, match=message):
        sweep.parse_grid(grids)


def test_the_settings_are_every_combination_with_grid_values_after_the_fixed_ones():
    items = sweep.settings({"a.x": ["1", "2"], "b.y": ["[3,4]", "5"]}, ["c.z=0"])
    assert [s.values for s in items] == [{"a.x": 1, "b.y": [3, 4]}, {"a.x": 1, "b.y": 5},
                                         {"a.x": 2, "b.y": [3, 4]}, {"a.x": 2, "b.y": 5}]
    assert items[1].overrides == ["c.z=0", "a.x=1", "b.y=5"]


def test_the_table_puts_the_best_auc_first_and_failures_last():
    rows = [sweep.Setting(0, {"k.v": 1}, [], error="exit 2: diverged"),
            sweep.Setting(1, {"k.v": 2}, [], result={"eval_auc": 0.6, "eval_logloss": 0.5, "samples_per_s": 10.0,
                                                     "steps": 3, "wall_s": 1.0}),
            sweep.Setting(2, {"k.v": 3}, [], result={"eval_auc": 0.7, "eval_logloss": 0.4, "samples_per_s": 10.0,
                                                     "steps": 3, "wall_s": 1.0})]
    table = sweep.tabulate("r", rows, [], 1, 3.0)
    assert [r["setting"]["k.v"] for r in table["rows"]] == [3, 2, 1]
    lines = sweep.markdown(table).splitlines()
    assert lines[4].startswith("| 3 | 0.7000") and lines[6].startswith("| 1 | failed: exit 2: diverged")


def _read(run_dir: str) -> dict:
    return json.loads((Path(run_dir) / "recipe.json").read_text())


@pytest.mark.slow
def test_a_sequential_sweep_trains_every_setting_into_its_own_run_dir(tmp_path, child_env):
    lines = []
    # two settings of two keys (every combination of more values: test_the_settings_are_every_combination...)
    table = sweep.run("criteo_synthetic", ["embedding.dim=4,8", "sparse_optimizer.lr=0.05"], tiny(tmp_path),
                      out_root=str(tmp_path / "runs"), echo=lines.append)
    rows = table["rows"]
    assert len(rows) == 2 and not any("error" in r for r in rows), rows
    assert len({r["run_dir"] for r in rows}) == 2
    for r in rows:  # each child trained the setting its row names, to the end
        recipe = _read(r["run_dir"])
        assert recipe["embedding"]["dim"] == r["setting"]["embedding.dim"]
        assert recipe["sparse_optimizer"]["lr"] == r["setting"]["sparse_optimizer.lr"]
        assert recipe["train"]["threads"] == 0  # sequential: each child takes the whole machine
        summary = json.loads((Path(r["run_dir"]) / "summary.json").read_text())
        assert r["eval_auc"] == summary["eval_auc"] and r["steps"] == 12 and r["wall_s"] > 0
    aucs = [r["eval_auc"] for r in rows]
    assert aucs == sorted(aucs, reverse=True) and all(0 < a < 1 for a in aucs)
    out = Path(table["dir"])
    assert json.loads((out / "sweep.json").read_text())["rows"] == rows
    md = (out / "sweep.md").read_text()
    assert md.count("\n| ") == 3 and md in "\n".join(lines) + "\n"  # header + 2 rows, also printed


@pytest.mark.slow
def test_a_parallel_sweep_turns_each_failure_into_a_row(tmp_path, child_env):
    table = sweep.run("criteo_synthetic", ["embedding.dim=4,0", "dense_optimizer.lr=0.003,1e12"], tiny(tmp_path),
                      parallel=2, out_root=str(tmp_path / "runs"), echo=lambda _: None)
    rows = {(r["setting"]["embedding.dim"], r["setting"]["dense_optimizer.lr"]): r for r in table["rows"]}
    good = rows[(4, 0.003)]
    assert table["rows"][0] is good and good["steps"] == 12 and 0 < good["eval_auc"] < 1
    assert _read(good["run_dir"])["train"]["threads"] == max(1, available_cores() // 2)
    diverged = rows[(4, 1e12)]  # fails in its child: the run's own error, from its log
    assert diverged["error"].startswith("exit 2") and "the loss at step" in diverged["error"]
    for lr in (0.003, 1e12):  # refused before any child starts
        assert "embedding.dim must be >= 1" in rows[(0, lr)]["error"]
        assert not Path(rows[(0, lr)]["run_dir"]).exists()
    assert "failed: exit 2" in (Path(table["dir"]) / "sweep.md").read_text()


@pytest.mark.slow
def test_the_command_line_runs_a_sweep_and_refuses_one_without_a_grid(tmp_path, capsys, child_env):
    assert cli.main(["sweep", "--set", "embedding.dim=4"]) == 2
    assert "needs at least one --grid" in capsys.readouterr().err
    assert cli.main(["sweep", "--grid", "embedding.dim=4", "--out", str(tmp_path / "runs"),
                     *sum((["--set", s] for s in tiny(tmp_path)), [])]) == 0
    (out,) = (tmp_path / "runs").iterdir()
    assert json.loads((out / "sweep.json").read_text())["rows"][0]["steps"] == 12


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sigterm_of_the_sweep_stops_its_training_child_too(tmp_path, child_env):
    """`kill SWEEP_PID` reaches the sweep alone (no terminal's process group): the setting it was
    training is told to save and stop, not left training on as an orphan."""
    import signal
    import subprocess
    import sys
    import time

    from helpers.launch import leftovers

    cmd = [sys.executable, "-m", "cardinal.cli", "sweep", "--out", str(tmp_path / "runs"),
           *sum((["--set", s] for s in [*tiny(tmp_path), "train.epochs=1000", 'eval.early_stop="none"']), []),
           "--grid", "embedding.dim=4,8"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not any("cardinal.cli train" in line for line in leftovers(tmp_path)):
            assert time.monotonic() < deadline and proc.poll() is None, "no setting started"
            time.sleep(0.2)
        time.sleep(3)  # the child is training, its signal handler set
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        deadline = time.monotonic() + 60
        while leftovers(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert leftovers(tmp_path) == []
        (out,) = (tmp_path / "runs").iterdir()
        assert [p.name for p in out.iterdir() if p.is_dir()] == ["00-embedding.dim=4"]  # no further setting
    finally:
        for line in leftovers(tmp_path):
            os.kill(int(line.split()[0]), signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
