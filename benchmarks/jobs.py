"""Shared by the benchmarks that run Cardinal as a user does: ``cardinal train`` / ``cardinal launch``.

    summary = launch(servers=2, workers=2, sets=["train.steps=100"], root=tmp / "2x2")
    summary = train(sets, root=tmp / "embedded")          # the embedded default, one process

Each run gets its own run-directory root (``train.run_dir``), its output goes to ``<root>.log``
rather than into memory, and the result is the run's ``summary.json``, so the benchmarks depend
only on the command line and that file, not on the trainer's internals. A run past its deadline,
or a Ctrl-C, gets SIGINT first: ``cardinal launch`` then stops every server and worker it
started (a SIGKILL to the launcher would orphan them); SIGKILL only if it does not exit.
"""

import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

STOP_GRACE_S = 60.0  # the launcher's own grace (SIGTERM, then SIGKILL) is 10 s per process group


@dataclass
class Run:
    code: int              # exit status (0: trained and wrote summary.json)
    summary: dict | None   # summary.json, or None when the run failed
    log: Path              # everything the run printed

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def set_args(sets: list[str]) -> list[str]:
    """``--set`` flags for each ``section.key=value``."""
    return [arg for s in sets for arg in ("--set", s)]


def train(sets: list[str], root: Path, timeout_s: float) -> Run:
    """``cardinal train`` (the embedded default) with the recipe's values overridden by ``sets``."""
    return _run(["train"], sets, root, timeout_s)


def launch(servers: int, workers: int, sets: list[str], root: Path, timeout_s: float) -> Run:
    """``cardinal launch --servers S --workers W``: S server processes, W worker processes."""
    return _run(["launch", "--servers", str(servers), "--workers", str(workers), "--"], sets, root, timeout_s)


def traffic_per_sample(summary: dict) -> float | None:
    """gRPC message bytes (requests + replies, all workers) per training sample; None without a network."""
    if "bytes_sent" not in summary or not summary.get("samples"):
        return None
    return (summary["bytes_sent"] + summary.get("bytes_received", 0)) / summary["samples"]


def _run(command: list[str], sets: list[str], root: Path, timeout_s: float) -> Run:
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    log = root.with_suffix(".log")
    cmd = [sys.executable, "-m", "cardinal.cli", *command, *set_args([*sets, f'train.run_dir="{root}"'])]
    with open(log, "w") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            out.write(f"\nbenchmark: no result after {timeout_s:.0f} s; stopping the run\n")
            out.flush()
            _stop(process)
            code = 124
        except BaseException:  # Ctrl-C: leave no server or worker behind
            _stop(process)
            raise
    found = sorted(root.glob("*/summary.json"))
    summary = json.loads(found[-1].read_text()) if code == 0 and found else None
    return Run(code if summary is not None or code else 1, summary, log)


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
