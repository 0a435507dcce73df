"""``cardinal launch``: a whole job on one machine, every process accounted for.

    cardinal launch --servers 2 --workers 2 -- [RECIPE] [--set section.key=value ...] [--resume RUN_DIR]

Starts S parameter servers (``cardinal server``, ports picked by the OS, a fresh job token),
waits until each is listening, runs W workers (``cardinal train`` with RANK / WORLD_SIZE as
torchrun would set them) against them, and streams every process's output with a prefix.
The servers are the job's: after its final checkpoint worker 0 ends them (they exit 0,
``ps/server/process.py``). Whatever happens (success, a failed process, Ctrl-C) it stops every
process still running that it started: SIGTERM, then SIGKILL after a grace period. The exit code is the first failing worker's,
0 when all succeed, 130 on Ctrl-C (SIGINT), 143 on SIGTERM.

Ctrl-C or SIGTERM is forwarded to the workers first, and the servers are stopped only after the
workers exited (or ``WORKER_SAVE_S`` passed): the workers agree on a step, save it on the
servers, and exit (train/interrupt.py); stopping the servers first would lose that checkpoint.
Every process runs in its own session, so a terminal's Ctrl-C reaches the launcher alone and
each worker is signalled once, by the launcher.
"""

import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from cardinal import planner
from cardinal.ps.server.process import READY
from cardinal.recipe import load
from cardinal.train import tables
from cardinal.train import resume as resuming
from cardinal.train.recipe_toml import to_toml
from cardinal.train.run_dirs import new_run_dir

GRACE_S = 10.0
WORKER_SAVE_S = 300.0  # how long interrupted workers may take to save before the servers are stopped
SERVER_START_S = 120.0
_out = threading.Lock()


def say(text: str, stream=None) -> None:
    """One whole line to stdout (or ``stream``): the streaming threads and the launcher share it."""
    with _out:
        (stream or sys.stdout).write(text if text.endswith("\n") else text + "\n")
        (stream or sys.stdout).flush()


class Process:
    def __init__(self, name: str, cmd: list[str], env: dict):
        self.name = name
        self.popen = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      bufsize=1, start_new_session=True)
        self.ready = threading.Event()
        self.fields: dict[str, str] = {}
        self.thread = threading.Thread(target=self._stream, daemon=True)
        self.thread.start()

    def _stream(self) -> None:
        for line in self.popen.stdout:
            if line.startswith(READY):
                self.fields = dict(part.split("=", 1) for part in line.split()[1:])
                self.ready.set()
            say(f"[{self.name}] {line}")

    def alive(self) -> bool:
        return self.popen.poll() is None


def stop(processes: list[Process]) -> None:
    """SIGTERM every live process, SIGKILL what is left after the grace period."""
    for p in processes:
        if p.alive():
            p.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for p in processes:
        try:
            p.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.popen.kill()
            p.popen.wait()
    for p in processes:
        p.thread.join(2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(n_servers: int, n_workers: int, train_args: list[str],
           split_train_args: Callable[[list[str]], tuple[str, list[str], str | None]]) -> int:
    """The job; ``train_args`` are what each worker's ``cardinal train`` takes, and
    ``split_train_args`` reads them as it does: (recipe, --set values, --resume dir)."""
    if n_servers < 1 or n_workers < 1:
        raise ValueError("--servers and --workers must be >= 1")
    recipe_name, sets, resume = split_train_args(train_args)
    server_recipe, scratch = recipe_name, None
    if resume:  # the run's recipe.json plus the --set values, checked as `cardinal train --resume` checks them
        run_dir = Path(resume).resolve()
        recipe = resuming.resumed_recipe(run_dir, sets)
        resuming.check_not_done(run_dir, recipe)
        scratch = tempfile.TemporaryDirectory(prefix="cardinal-launch-")  # the servers' tables are the run's,
        server_recipe = str(Path(scratch.name) / "recipe.toml")            # not RECIPE's (workers read recipe.json)
        Path(server_recipe).write_text(to_toml(recipe))
    else:
        recipe = load(recipe_name, sets)
    recipe.consistency.resolve(distributed=True)  # a job of servers: a knob of the mode "auto" is not, refused now
    if not resume:  # two launches in the same second get two directories
        run_dir = new_run_dir(Path(recipe.train.run_dir), recipe.train.name).resolve()
    job = f"{recipe.train.name}-{secrets.token_hex(4)}"
    env = {**os.environ, "CARDINAL_TOKEN": secrets.token_hex(16), "PYTHONUNBUFFERED": "1"}
    common = [*sum((["--set", s] for s in sets), []), "--set", f'ps.job="{job}"']
    plan_file = run_dir / "plan.json"
    if recipe.plan.layout == "auto" or resume and _replans(recipe.plan.layout, plan_file, n_servers):
        # the planner once, its plan to every process (each would read the data)
        run_dir.mkdir(parents=True, exist_ok=True)
        plan = planner.resolve(tables.plan_inputs(replace(recipe, plan=replace(recipe.plan, layout="auto"))), n_servers)
        planner.write(plan, plan_file)
        say(f"cardinal launch: sharding plan for {n_servers} servers in {plan_file}: {len(plan.tables)} tables placed, "
            "the rest row-wise over every server")
        common = [*sum((["--set", s] for s in planner.without_plan_settings(sets)), []), "--set", f'ps.job="{job}"',
                  "--set", f'plan.layout="{plan_file}"']  # the settings the file holds now: a process would refuse them
    me = [sys.executable, "-m", "cardinal.cli"]
    processes: list[Process] = []
    interrupted = Signals()
    previous = {s: signal.signal(s, interrupted.handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for i in range(n_servers):
            processes.append(Process(f"server {i}", [*me, "server", server_recipe, "--shard", f"{i}/{n_servers}",
                                                     "--data-dir", str(run_dir), *common], env))
        deadline = time.monotonic() + SERVER_START_S
        for p in processes:
            while not p.ready.wait(0.2):
                if not p.alive() or interrupted.is_set() or time.monotonic() > deadline:
                    say(f"cardinal launch: {p.name} did not start", sys.stderr)
                    return 128 + interrupted.signum if interrupted.is_set() else 1
        addresses = [f"127.0.0.1:{p.fields['port']}" for p in processes]
        say(f"cardinal launch: {n_servers} servers at {', '.join(addresses)}; run directory {run_dir}")
        watch = [f"127.0.0.1:{p.fields['metrics']}" for p in processes if "metrics" in p.fields]
        if recipe.metrics.port > 0:  # each worker at that port + its rank
            watch += [f"127.0.0.1:{recipe.metrics.port + r}" for r in range(n_workers)]
        if watch:
            say(f"cardinal launch: watch it with: cardinal top {' '.join(watch)}")
        threads = str(max(1, (os.cpu_count() or 1) // n_workers))  # each worker its share: no oversubscription
        worker_env = {**env, "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", threads), "WORLD_SIZE": str(n_workers),
                      "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(free_port()), "CARDINAL_RUN_DIR": str(run_dir)}
        servers_set = "ps.servers=[" + ",".join(f'"{a}"' for a in addresses) + "]"
        workers = []
        for r in range(n_workers):
            cmd = [*me, "train", recipe_name, *common, "--set", servers_set, *(["--resume", str(run_dir)] if resume else [])]
            workers.append(Process(f"worker {r}", cmd, {**worker_env, "RANK": str(r), "LOCAL_RANK": str(r)}))
        processes += workers
        code = _supervise(processes[:n_servers], workers, interrupted)
        if interrupted.is_set():
            again = [a for a in train_args if a != "--resume" and a != resume]
            command = ["cardinal", "launch", "--servers", str(n_servers), "--workers", str(n_workers), "--", *again,
                       "--resume", str(run_dir)]
            say(f"cardinal launch: interrupted; resume with: {shlex.join(command)}", sys.stderr)
        return code
    finally:
        stop(processes)
        if scratch is not None:
            scratch.cleanup()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _replans(plan: str, own: Path, n_servers: int) -> bool:
    """A resumed run whose own plan (the launcher's, ``<run>/plan.json``) was made for another
    server count is planned again for this one (a checkpoint loads into any plan)."""
    return plan not in ("hash", "auto") and Path(plan).resolve() == own.resolve() and own.is_file() \
        and planner.read(own).n_shards != n_servers


class Signals:
    """The first SIGINT or SIGTERM the launcher got (``signum``); later ones are told to wait."""

    def __init__(self):
        self.event, self.signum = threading.Event(), 0

    def handle(self, signum: int, frame=None) -> None:
        if self.event.is_set():
            say(f"cardinal launch: waiting for the workers to save (at most {WORKER_SAVE_S:.0f} s)", sys.stderr)
            return
        self.signum = signum
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()


def _finish_interrupted(workers: list[Process], signum: int) -> int:
    """Forward the signal to the workers and wait (bounded) for them to save and exit."""
    say(f"cardinal launch: {signal.Signals(signum).name}: the workers save a checkpoint and stop", sys.stderr)
    for w in workers:
        if w.alive():
            w.popen.send_signal(signum)
    deadline = time.monotonic() + WORKER_SAVE_S
    for w in workers:
        try:
            w.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"cardinal launch: {w.name} did not stop within {WORKER_SAVE_S:.0f} s; stopping it", sys.stderr)
    for w in workers:
        if w.popen.returncode not in (None, 0, 128 + signum):
            say(f"cardinal launch: {w.name} exited with code {w.popen.returncode} while stopping", sys.stderr)
    return 128 + signum


def _supervise(servers: list[Process], workers: list[Process], interrupted: Signals) -> int:
    while True:
        if interrupted.is_set():
            return _finish_interrupted(workers, interrupted.signum)
        codes = [w.popen.poll() for w in workers]
        failed = [(w, c) for w, c in zip(workers, codes) if c not in (None, 0)]
        if failed:
            w, code = failed[0]
            say(f"cardinal launch: {w.name} exited with code {code}; stopping the rest", sys.stderr)
            return code
        if all(c == 0 for c in codes):
            return 0
        for s in servers:
            if not s.alive():
                if s.popen.returncode != 0:  # 0: the job finished (worker 0 ended it), the workers are exiting
                    say(f"cardinal launch: {s.name} exited with code {s.popen.returncode}", sys.stderr)
                servers.remove(s)  # the workers notice on their next call and exit, naming it
        time.sleep(0.2)
