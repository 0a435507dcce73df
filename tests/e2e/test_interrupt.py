"""Runs that survive Ctrl-C and SIGTERM: `cardinal train` (and `cardinal launch`) finish the step,
commit a checkpoint, print one line, exit 130 / 143, and `--resume` goes on from that step.
Real processes and real signals, every wait with a deadline, every process stopped."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cardinal.checkpoint import layout
from helpers.launch import launch_cmd, leftovers

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1"}
LINE = re.compile(r"^interrupted at step (\d+); resume with: cardinal train --resume (\S+)$", re.M)


def train_cmd(tmp_path, *sets, resume=None):
    base = [f'data.cache_dir="{tmp_path / "data"}"', f'train.run_dir="{tmp_path / "runs"}"',
            "data.synthetic.rows=3000", "data.synthetic.eval_rows=1000", "data.synthetic.vocab=300",
            "data.batch_size=256", "model.hidden=[16]", "embedding.dim=4", "metrics.log_every=1", *sets]
    tail = ["--resume", str(resume)] if resume else []
    return [sys.executable, "-m", "cardinal.cli", "train", *sum((["--set", s] for s in base), []), *tail]


def signal_after(cmd, sig: int, pattern: str, target=None, limit_s: float = 120,
                 marker=None) -> tuple[int, str, list[str]]:
    """Run ``cmd``, send ``sig`` (to ``target(proc)``'s pid, default the process) once a line
    matching ``pattern`` is printed; (exit code, all output, processes whose command line holds
    ``marker`` left when it exited). Those are then killed, so a failing test leaves none either."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
                            start_new_session=True)
    out, leaked = [], []
    try:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            out.append(line)
            if re.search(pattern, line):
                os.kill(target(proc) if target else proc.pid, sig)
                break
        rest, _ = proc.communicate(timeout=limit_s)  # the deadline: a run that does not stop fails here
        out.append(rest)
        leaked = leftovers(marker) if marker is not None else []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if marker is not None:  # a launcher killed above leaves its servers and workers (own sessions)
            for line in leftovers(marker):
                os.kill(int(line.split()[0]), signal.SIGKILL)
    return proc.returncode, "".join(out), leaked


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_saves_the_step_prints_one_line_and_the_run_resumes_from_it(tmp_path, sig, code):
    exit_code, out, _ = signal_after(train_cmd(tmp_path, "train.epochs=1000"), sig, r"training: step 3\b")
    assert exit_code == code, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    lines = LINE.findall(out)
    assert len(lines) == 1, out[-3000:]
    step, run_dir = int(lines[0][0]), Path(lines[0][1])
    assert step >= 3
    assert layout.committed_steps(run_dir / "checkpoints") == [step]  # the step it stopped at, committed
    done = subprocess.run(train_cmd(tmp_path, f"train.steps={step + 2}", resume=run_dir), env=ENV,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [int(s) for s in re.findall(r"training: step (\d+)/", done.stderr)]
    assert steps == [step + 1, step + 2], done.stderr[-3000:]  # it went on from that step, not from 0
    assert layout.committed_steps(run_dir / "checkpoints") == [step + 2]


def worker_pid(launcher: subprocess.Popen, rank: int) -> int:
    """The pid of worker ``rank`` among the launcher's children (by the RANK in its environment)."""
    children = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True).stdout.split()
    for pid in children:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and any(e.startswith(b"CARDINAL_RUN_DIR=") for e in env):
            return int(pid)
    raise AssertionError(f"worker {rank} not found among {children}")


def launched_line(out: str) -> tuple[int, Path]:
    found = re.findall(r"\[worker 0\] interrupted at step (\d+); resume with: cardinal train --resume (\S+)", out)
    assert len(found) == 1, out[-4000:]
    return int(found[0][0]), Path(found[0][1])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_under_launch_lets_the_workers_save_before_the_servers_stop(tmp_path):
    cmd = launch_cmd(tmp_path, 1, 2, "train.epochs=1000", "metrics.log_every=2")
    code, out, leaked = signal_after(cmd, signal.SIGINT, r"\[worker 0\] training: step 4\b", marker=tmp_path)
    assert code == 130, out[-4000:]
    assert "Traceback" not in out and "while stopping" not in out, out[-4000:]
    step, run_dir = launched_line(out)
    assert layout.committed_steps(run_dir / "checkpoints") == [step]
    assert re.search(r"cardinal launch: interrupted; resume with: cardinal launch --servers 1 --workers 2 -- .*"
                     rf"--resume {re.escape(str(run_dir))}", out), out[-3000:]
    # off a terminal the workers print plain lines, one per log interval (metrics.log_every=2) and one
    # for the step they stopped at, no bars (worker 0 alone: it is the one that reports)
    logged = [int(s) for s in re.findall(r"\[worker \d\] training: step (\d+)", out)]
    assert logged == sorted({*range(2, step + 1, 2), step}) and "\r" not in out, out[-3000:]
    assert leaked == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_signal_to_one_worker_stops_every_worker_at_the_same_step(tmp_path):
    """Only worker 1 is signalled: the flag travels in the step's all-reduce, so worker 0 stops at the
    same step, saves it and exits 143 too (a worker left behind would fail in its next collective)."""
    cmd = launch_cmd(tmp_path, 1, 2, "train.epochs=1000", "metrics.log_every=2")
    code, out, leaked = signal_after(cmd, signal.SIGTERM, r"\[worker 0\] training: step 4\b",
                             target=lambda launcher: worker_pid(launcher, 1), marker=tmp_path)
    assert code == 143, out[-4000:]  # the launcher exits with the first failing worker's code
    assert "Traceback" not in out, out[-4000:]
    step, run_dir = launched_line(out)
    assert layout.committed_steps(run_dir / "checkpoints") == [step]
    assert re.search(r"worker \d exited with code 143", out), out[-3000:]
    assert leaked == []


@pytest.mark.slow
def test_a_second_signal_is_told_to_wait_and_a_third_aborts(capsys):
    """While the step is finished and saved, Ctrl-C again says so and goes on; a third aborts at once
    (a checkpoint being written is then never committed: checkpoint/write.py)."""
    from cardinal.train.interrupt import StopFlag

    stop = StopFlag()
    stop.request(signal.SIGINT)
    assert stop.flags() == (1.0, 0.0) and capsys.readouterr().err == ""
    stop.request(signal.SIGINT)
    assert "saving a checkpoint" in capsys.readouterr().err and stop.requested == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        stop.request(signal.SIGINT)
    other = StopFlag()
    assert other.agree(1.0, 0.0) and other.agreed == signal.SIGINT  # a peer's signal stops this worker too
    assert not StopFlag().agree(0.0, 0.0)
