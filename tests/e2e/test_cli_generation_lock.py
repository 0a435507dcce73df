"""A lock around first-time data generation (issue 10, item 5): processes asking at once for the
same generated data set get one generation; a crashed generation leaves nothing that looks complete."""

import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cardinal.data.generation_lock import generated_once
from cardinal.recipe import load
from cardinal.train.readers import ensure_synthetic, synthetic_dir
from helpers.processes import reaped, succeeded

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["data.synthetic.rows=20000", "data.synthetic.eval_rows=2000", "data.synthetic.vocab=300"]

READ = textwrap.dedent("""
    import hashlib, json, sys
    from cardinal.recipe import load
    from cardinal.train.readers import ensure_synthetic, synthetic_dir
    cfg = load(None, sys.argv[1:]).data
    teacher = ensure_synthetic(cfg, progress=False)
    d = synthetic_dir(cfg)
    print(json.dumps({name: hashlib.sha256((d / name).read_bytes()).hexdigest()
                      for name in ("train.tsv", "eval.tsv", "teacher.json")}))
""")


@pytest.mark.slow
def test_two_processes_generating_the_same_data_set_at_once_both_read_one_copy(tmp_path):
    sets = [f'data.cache_dir="{tmp_path}"', *SMALL]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [subprocess.Popen([sys.executable, "-c", READ, *sets], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    with reaped(procs):
        first, second = (json.loads(out) for out in succeeded(procs))
    assert first == second
    d = synthetic_dir(load(None, sets).data)
    assert first["train.tsv"] == hashlib.sha256((d / "train.tsv").read_bytes()).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == [d.name, d.name + ".lock"]  # no half set left


def test_a_crashed_generation_leaves_nothing_that_looks_complete(tmp_path, monkeypatch):
    cfg = load(None, [f'data.cache_dir="{tmp_path}"', *SMALL]).data
    import cardinal.train.readers as readers

    real = readers.generate

    def crash(out, synthetic, progress=None):
        (Path(out) / "train.tsv").write_text("half a file\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(readers, "generate", crash)
    with pytest.raises(KeyboardInterrupt):
        ensure_synthetic(cfg, progress=False)
    assert not synthetic_dir(cfg).exists()
    assert not list(tmp_path.glob("*.tmp-*"))  # Ctrl-C leaves no partial copy behind either
    monkeypatch.setattr(readers, "generate", real)
    teacher = ensure_synthetic(cfg, progress=False)  # the next run generates it whole
    assert teacher["train"]["rows"] == 20000 and len((synthetic_dir(cfg) / "train.tsv").read_bytes().splitlines()) == 20000
    assert not list(tmp_path.glob("*.tmp-*"))


def test_a_waiting_process_says_so_and_gives_up_at_its_deadline(tmp_path, caplog):
    out = tmp_path / "set"
    with open(tmp_path / "set.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process generating
        with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match="waited 0 s for the process generating"):
            generated_once(out, lambda d: (d / "done").exists(), lambda d: (d / "done").touch(), wait_s=0.3)
        assert "another process is generating set; waiting for it" in caplog.text
        fcntl.flock(held, fcntl.LOCK_UN)
    assert generated_once(out, lambda d: (d / "done").exists(), lambda d: (d / "done").touch()) == out
    assert (out / "done").exists()
