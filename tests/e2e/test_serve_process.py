"""`cardinal serve` as a real process on 127.0.0.1: it follows a training run that goes on beside
it, answers a bounded load of good and malformed requests without failing one good request,
and stops on SIGTERM. Killed whatever happens."""

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from cardinal import cli
from cardinal.train import Trainer
from helpers.recipes import tiny_recipe
from helpers.processes import reaped
from helpers.raw_http import poll_for

pytestmark = pytest.mark.slow
FLAGS = ("checkpoint.every=4", "checkpoint.full_every=4", 'eval.early_stop="none"', "checkpoint.keep=10")


def call(port, path, body=None, timeout=10):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def started(proc, deadline=60.0) -> int:
    """The port the server printed once it listens."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if "serving on http://127.0.0.1:" in line:
            return int(line.split("127.0.0.1:")[1].split()[0])
        if not line and proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"the server did not start: {proc.stderr.read()[-3000:]}")


def test_serve_follows_training_under_load_and_stops_on_sigterm(tmp_path):
    run = tmp_path / "run"
    first = tiny_recipe(tmp_path, *FLAGS, "train.steps=8")
    trainer = Trainer(first, run, progress=False)
    trainer.fit()
    trainer.close()
    assert cli.main(["export", str(run), "--out", str(tmp_path / "x")]) == 0
    line = next((tmp_path / "data").glob("*/eval.tsv")).read_text().splitlines()[0]
    proc = subprocess.Popen([sys.executable, "-m", "cardinal.cli", "serve", str(tmp_path / "x"), "--port", "0",
                             "--follow", str(run), "--poll", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with reaped([proc]):
        port = started(proc)
        poll_for(lambda: call(port, "/readyz")[0] == 200, what="readiness")  # 503 while the reload path warms
        assert json.loads(call(port, "/readyz")[1]) == {"ready": True, "step": 8}
        results, stop = [], threading.Event()

        def load():  # a good request and a malformed one, over and over, while training goes on
            while not stop.is_set() and len(results) < 2000:
                status, body = call(port, "/predict", {"labelled_rows": [line]})
                results.append((status, json.loads(body).get("step")))
                results.append((call(port, "/predict", {"examples": [{"C9": "not hex"}]})[0], None))

        client = threading.Thread(target=load)
        client.start()
        try:
            more = Trainer(tiny_recipe(tmp_path, *FLAGS, "train.steps=12"), run, progress=False)
            more.fit(resume=True)  # checkpoints 12 (a delta on 8): the server swaps it in
            more.close()
            poll_for(lambda: json.loads(call(port, "/readyz")[1])["step"] == 12, what="the reload of step 12")
            poll_for(lambda: any(s == 12 for _, s in results), what="an answer from step 12")
        finally:
            stop.set()
            client.join(timeout=60)
        good = [r for r in results if r[1] is not None or r[0] == 200]
        assert good and all(status == 200 for status, _ in good)  # no failed request across the reload
        assert all(status == 400 for status, step in results if step is None and status != 200)
        assert {s for _, s in good} <= {8, 12}
        metrics = call(port, "/metrics")[1].decode()
        assert 'cardinal_serve_reloads_total{result="ok"} 1.0' in metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
