"""`cardinal serve` against hostile clients, as a real process on 127.0.0.1 spoken to over raw
sockets: bodies past the limit are refused before they are read, a large body is parsed without
stalling other requests, half-sent requests are closed after the read timeouts, connections past
the cap go (idle ones first) while real requests are served, and a flood writes a bounded log."""

import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
import time

import pytest

from cardinal import cli
from cardinal.serve.requests import COLUMNS
from cardinal.train import Trainer
from helpers.recipes import tiny_recipe
from helpers.processes import reaped
from helpers.raw_http import ask, closed, half_sent, poll_for, sockets

pytestmark = pytest.mark.slow
SMALL = json.dumps({"examples": [{"I1": 3, "C1": "68fd1e64"}]}).encode()
WIDEST = {c: -99999999999999999 if c[0] == "I" else "ffffffff" for c in COLUMNS}  # 842 bytes of JSON


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("edge")
    trainer = Trainer(tiny_recipe(tmp, "train.steps=4", "checkpoint.every=4", 'eval.early_stop="none"'),
                      tmp / "run", progress=False)
    trainer.fit()
    trainer.close()
    assert cli.main(["export", str(tmp / "run"), "--out", str(tmp / "x")]) == 0
    return tmp / "x"


@contextlib.contextmanager
def serving(export, tmp_path, *settings: str, files: int = 0):
    """A `cardinal serve` process with these ``--set`` limits (``files``: its descriptor limit); yields
    (process, port, its stderr file). Killed whatever happens."""
    def limit_files():
        if files:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    err = tmp_path / "serve.stderr"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "cardinal.cli", "serve", str(export), "--port", "0",
                                 *(a for s in settings for a in ("--set", s))],
                                stdout=subprocess.PIPE, stderr=stderr, text=True, preexec_fn=limit_files)
    with reaped([proc]):
        line = proc.stdout.readline()  # "serving on http://127.0.0.1:PORT ..." once it listens
        assert "serving on http://127.0.0.1:" in line, err.read_text()[-3000:]
        port = int(line.split("127.0.0.1:")[1].split()[0])
        assert ask(port, "POST", "/predict", SMALL)[0] == 200  # the first call loads the parser's kernel
        yield proc, port, err


def status_kb(pid: int, field: str) -> int:
    line = next(x for x in open(f"/proc/{pid}/status") if x.startswith(field + ":"))
    return int(line.split()[1])


def test_a_body_past_max_body_mb_is_refused_before_it_is_read_and_memory_stays_flat(export, tmp_path):
    flood = b'{"examples": [' + b", ".join([b"{}"] * 3_900_000) + b"]}"  # the audit's 15.6 MB of empty examples
    spam = b'{"examples": [' + b", ".join([b"{}"] * 1_000_000) + b"]}"  # 4.0 MB: under the 4 MiB limit
    with serving(export, tmp_path) as (proc, port, _):
        peak = status_kb(proc.pid, "VmHWM")
        answers = [ask(port, "POST", "/predict", flood), ask(port, "POST", "/predict", spam)]
        assert status_kb(proc.pid, "VmHWM") - peak < 48 << 10  # KiB; parsed whole, the first took +403 MB
        assert answers[0][0] == 413 and b"max_body_mb" in answers[0][1]  # before it is read
        assert answers[1][0] == 413 and b"more than the 4096 examples" in answers[1][1]  # at its 4,097th example
        assert ask(port, "POST", "/predict", SMALL)[0] == 200


def test_a_large_body_is_parsed_without_stalling_other_requests(export, tmp_path):
    big = json.dumps({"examples": [WIDEST] * 4096}).encode()  # 3.4 MB: the most a request may hold
    with serving(export, tmp_path) as (proc, port, _):
        assert ask(port, "POST", "/predict", big)[0] == 200
        stop, answered, large, small = threading.Event(), [], [], []

        def send_large():
            while not stop.is_set():
                start = time.perf_counter()
                answered.append(ask(port, "POST", "/predict", big)[0])
                large.append(time.perf_counter() - start)

        senders = [threading.Thread(target=send_large) for _ in range(4)]  # four at once, as in the audit
        for t in senders:
            t.start()
        try:
            time.sleep(0.5)
            end = time.monotonic() + 3
            while time.monotonic() < end:
                start = time.perf_counter()
                assert ask(port, "GET", "/healthz")[0] == 200
                small.append(time.perf_counter() - start)
                time.sleep(0.01)
        finally:
            stop.set()
            for t in senders:
                t.join(timeout=60)
    assert answered and set(answered) == {200}
    small.sort()
    median, large_median = small[len(small) // 2], sorted(large)[len(large) // 2]
    print(f"/healthz beside 4 large requests: {len(small)} calls, median {median * 1e3:.1f} ms, max "
          f"{small[-1] * 1e3:.1f} ms; large ones: {len(large)}, median {large_median * 1e3:.0f} ms")
    # parsed whole on the loop, a small call waits for whole parses: median 716 ms, 0.42 of a large one's time
    # (load average 9 on 2 cores); in slices 51 ms, 0.03. Wall times scale with the machine's load, the ratio not
    assert median < 0.15 * large_median and median < 0.25


def test_half_sent_requests_are_closed_after_the_read_timeouts(export, tmp_path):
    with serving(export, tmp_path, "header_timeout_s=1", "body_timeout_s=1") as (proc, port, _), sockets() as opened:
        heads = half_sent(port, opened, 100, b"POST /predict HTTP/1.1\r\nHost: t\r\nContent-Len")
        silent = half_sent(port, opened, 20, b"")
        bodies = half_sent(port, opened, 20, b"POST /predict HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n{")
        received: dict = {}
        took = poll_for(lambda: all([closed(s, received) for s in opened]), 10, "the server to close them all")
        assert took < 6
        assert all(received.get(s, b"").startswith(b"HTTP/1.1 408") for s in bodies)
        assert not any(received.get(s) for s in heads + silent)
        assert ask(port, "POST", "/predict", SMALL)[0] == 200


def test_past_the_connection_cap_idle_ones_go_and_real_requests_are_served(export, tmp_path):
    settings = ("max_connections=50", "header_timeout_s=60", "body_timeout_s=60")
    with serving(export, tmp_path, *settings, files=256) as (proc, port, _), sockets() as opened:
        before = len(os.listdir(f"/proc/{proc.pid}/fd"))
        half_sent(port, opened, 300, b"GET /healthz HTTP/1.1\r\nHo")  # more than the process has descriptors
        assert ask(port, "POST", "/predict", SMALL, timeout=10)[0] == 200
        poll_for(lambda: len(os.listdir(f"/proc/{proc.pid}/fd")) <= before + 50, 10, "idle connections dropped")
        busy = half_sent(port, opened, 50, b"POST /predict HTTP/1.1\r\nHost: t\r\nContent-Length: 99\r\n\r\n{")
        time.sleep(0.5)  # each in its request now, reading a body: none is dropped for a new one
        refused = half_sent(port, opened, 1, b"")[0]  # it sends nothing: the answer is not lost to a reset
        received: dict = {}
        poll_for(lambda: closed(refused, received), 5, "a refusal")  # at once, not left waiting
        assert received[refused].startswith(b"HTTP/1.1 503")
        assert not any(closed(s) for s in busy)


def test_a_flood_of_malformed_requests_writes_a_bounded_log(export, tmp_path):
    with serving(export, tmp_path) as (proc, port, err), sockets() as opened:
        before = err.stat().st_size
        for s in half_sent(port, opened, 300, b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n"):
            poll_for(lambda: closed(s), 10, "a 400")
        time.sleep(0.5)
        logged = err.stat().st_size - before
        assert logged < 40_000, err.read_text()[-2000:]  # a traceback each: ~600 kB
        assert ask(port, "POST", "/predict", SMALL)[0] == 200
