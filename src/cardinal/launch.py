"""``cardinal launch``: a whole job on one machine, every process accounted for.

    cardinal launch --servers 2 --workers 2 -- [RECIPE] [--set section.key=value ...] [--resume RUN_DIR]

Starts S parameter servers (``cardinal server``, ports picked by the OS, a fresh job token),
waits until each is listening, runs W workers (``cardinal train`` with RANK / WORLD_SIZE as
torchrun would set them) against them, and streams every process's output with a prefix.
Whatever happens (success, a failed process, Ctrl-C) it stops every process it started:
SIGTERM, then SIGKILL after a grace period. The exit code is the first failing worker's,
0 when all succeed, 130 on Ctrl-C.
"""

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from cardinal.ps.server import READY

GRACE_S = 10.0
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


def split_train_args(args: list[str]) -> tuple[str, list[str], str | None]:
    """(recipe, --set values, --resume dir) from the arguments meant for ``cardinal train``."""
    from cardinal.cli import parser

    parsed = parser().parse_args(["train", *args])
    return parsed.recipe, parsed.set, parsed.resume


def launch(n_servers: int, n_workers: int, train_args: list[str]) -> int:
    from cardinal.train import config

    if n_servers < 1 or n_workers < 1:
        raise ValueError("--servers and --workers must be >= 1")
    recipe_name, sets, resume = split_train_args(train_args)
    recipe = config.load(recipe_name, sets)
    run_dir = Path(resume) if resume else Path(recipe.train.run_dir) / f"{recipe.train.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    job = f"{recipe.train.name}-{secrets.token_hex(4)}"
    env = {**os.environ, "CARDINAL_TOKEN": secrets.token_hex(16), "PYTHONUNBUFFERED": "1"}
    common = [*sum((["--set", s] for s in sets), []), "--set", f'ps.job="{job}"']
    me = [sys.executable, "-m", "cardinal.cli"]
    processes: list[Process] = []
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    try:
        for i in range(n_servers):
            processes.append(Process(f"server {i}", [*me, "server", recipe_name, "--shard", f"{i}/{n_servers}",
                                                     "--data-dir", str(run_dir), *common], env))
        deadline = time.monotonic() + SERVER_START_S
        for p in processes:
            while not p.ready.wait(0.2):
                if not p.alive() or interrupted.is_set() or time.monotonic() > deadline:
                    say(f"cardinal launch: {p.name} did not start", sys.stderr)
                    return 130 if interrupted.is_set() else 1
        addresses = [f"127.0.0.1:{p.fields['port']}" for p in processes]
        say(f"cardinal launch: {n_servers} servers at {', '.join(addresses)}; run directory {run_dir}")
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
        return _supervise(processes[:n_servers], workers, interrupted)
    finally:
        stop(processes)
        signal.signal(signal.SIGINT, previous)


def _supervise(servers: list[Process], workers: list[Process], interrupted: threading.Event) -> int:
    while True:
        if interrupted.is_set():
            say("cardinal launch: interrupted; stopping every process", sys.stderr)
            return 130
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
                say(f"cardinal launch: {s.name} exited with code {s.popen.returncode}", sys.stderr)
                servers.remove(s)  # the workers notice on their next call and exit, naming it
        time.sleep(0.2)
