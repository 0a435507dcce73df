"""Prometheus metrics: a real server's endpoint on 127.0.0.1, scraped while requests are sent,
counts what they did; refusals are counted by their status code; a worker's endpoint moves
with its steps; `cardinal top` reads both."""

import urllib.request

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig
from cardinal.sharding.routing import route
from cardinal.ps.transport import wire
from helpers.cluster import JOB, TOKEN, Cluster

CONFIG = StoreConfig((TableConfig("user", 8, seed=1), TableConfig("item", 4, seed=2)))


def scrape(port: int) -> dict:
    """{(name, frozenset(labels)): value} of every sample the endpoint serves."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def names(port: int) -> set[str]:
    """Every series name the endpoint declares, also of families with no sample yet (no eviction so far)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = set()
    for family in text_string_to_metric_families(text):
        out |= {family.name, f"{family.name}_total" if family.type == "counter" else family.name}
        out |= {s.name for s in family.samples}
    return out


def value(samples: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(CONFIG, 2, tmp_path / "ps", metrics_port=0)
    yield c
    c.stop()


def test_a_servers_metrics_move_with_the_requests_it_answers(cluster):
    ports = [s.metrics_port for s in cluster.servers]
    assert all(p for p in ports) and len(set(ports)) == 2
    before = scrape(ports[0])
    ids = np.arange(1000, dtype=np.int64)
    mine = int((route(ids, 2) == 0).sum())
    cluster.client.pull("user", ids, step=1).wait()
    cluster.client.push("user", ids, np.ones((1000, 8), np.float32), step=1).wait()
    cluster.client.pull("item", ids[:10], step=1).wait()
    after = scrape(ports[0])
    moved = lambda name, **ls: value(after, name, **ls) - value(before, name, **ls)  # noqa: E731
    assert moved("cardinal_ps_requests_total", method="Pull", table="user", code="OK", shard="0") == 1
    assert moved("cardinal_ps_requests_total", method="Push", table="user", code="OK") == 1
    assert moved("cardinal_ps_request_rows_total", method="Pull", table="user") == mine
    assert moved("cardinal_ps_request_seconds_count", method="Push", table="user") == 1
    assert moved("cardinal_ps_request_seconds_sum", method="Push", table="user") > 0
    assert value(after, "cardinal_ps_rows", table="user", shard="0") == mine
    assert moved("cardinal_ps_created_rows_total", table="user") == mine
    assert value(after, "cardinal_ps_rows", table="item") == int((route(ids[:10], 2) == 0).sum())
    assert value(after, "cardinal_ps_bytes", table="user") > 0
    assert value(after, "cardinal_ps_step") == 1
    assert value(after, "cardinal_ps_request_log_entries") >= 1  # the push's request id
    # the other server counted its own share only
    assert value(scrape(ports[1]), "cardinal_ps_rows", table="user", shard="1") == 1000 - mine


def test_refused_calls_are_counted_by_their_status_code(cluster):
    """Sent as raw bytes, past the client's own checks: a NaN gradient, an unknown table, no token."""
    port = cluster.servers[0].metrics_port
    ids = np.arange(200, dtype=np.int64)
    ids = ids[route(ids, 2) == 0]
    grads = np.ones((len(ids), 8), np.float32)
    grads[3, 2] = np.nan
    head = {"v": 1, "shard": 0, "n_shards": 2, "ids_bytes": ids.nbytes, "ids_dtype": "int64"}
    nan = wire.encode({**head, "table": "user", "grads_bytes": grads.nbytes, "dim": 8, "dtype": "float32",
                       "codec": "raw", "step": 1, "request_id": "t-1"}, ids.tobytes(), grads.tobytes())
    unknown = wire.encode({**head, "table": "nope"}, ids.tobytes())
    auth = (("x-cardinal-job", JOB), ("x-cardinal-token", TOKEN))
    with grpc.insecure_channel(cluster.addresses[0]) as ch:
        for method, message, metadata in (("Push", nan, auth), ("Pull", unknown, auth), ("Pull", unknown, ())):
            with pytest.raises(grpc.RpcError):
                ch.unary_unary(f"/{wire.SERVICE}/{method}")(message, metadata=metadata, timeout=10)
    after = scrape(port)
    assert value(after, "cardinal_ps_requests_total", method="Push", table="user", code="INVALID_ARGUMENT") == 1
    assert value(after, "cardinal_ps_requests_total", method="Pull", table="", code="INVALID_ARGUMENT") == 1
    assert value(after, "cardinal_ps_requests_total", method="Pull", code="UNAUTHENTICATED") == 1
    assert value(after, "cardinal_ps_requests_total", code="OK") == 0
    assert value(after, "cardinal_ps_rows", table="user") == 0  # refused: nothing made


@pytest.mark.slow
def test_a_workers_metrics_move_with_its_steps(tmp_path):
    from cardinal.train import Trainer
    from cardinal.train.callbacks import Callback
    from helpers.recipes import tiny_recipe

    seen = {}

    class Scrape(Callback):
        def on_step(self, trainer, step, loss):
            if step in (3, 9):
                seen[step] = scrape(trainer.live.port)

    trainer = Trainer(tiny_recipe(tmp_path, "metrics.port=0", "metrics.log_every=2"), tmp_path / "run",
                      progress=False, callbacks=[Scrape()])
    trainer.fit()
    port = trainer.live.port
    trainer.close()
    early, late = seen[3], seen[9]
    assert value(early, "cardinal_worker_steps_total", worker="0") == 2  # the last log step's snapshot
    assert value(late, "cardinal_worker_steps_total") == 8
    assert value(late, "cardinal_worker_samples_total") == 8 * 256
    for part in ("data", "dedup", "pull_wait", "compute", "push"):
        assert value(late, "cardinal_worker_seconds_total", part=part) >= value(early, "cardinal_worker_seconds_total",
                                                                                part=part)
    assert value(late, "cardinal_worker_seconds_total", part="compute") > 0
    assert value(late, "cardinal_worker_samples_per_s") > 0 and value(late, "cardinal_worker_loss") > 0
    with pytest.raises(OSError):  # closed with the trainer
        scrape(port)


def test_top_shows_each_servers_load_and_skew_and_names_what_it_cannot_reach(cluster, capsys):
    import threading

    from cardinal import cli

    addresses = [f"127.0.0.1:{s.metrics_port}" for s in cluster.servers]
    stop = threading.Event()

    def traffic():
        step = 0
        while not stop.is_set():
            step += 1
            cluster.client.pull("user", np.arange(500, dtype=np.int64), step=step).wait()

    t = threading.Thread(target=traffic)
    t.start()
    try:
        assert cli.main(["top", *addresses, "127.0.0.1:1", "--once", "--interval", "0.5"]) == 0
    finally:
        stop.set()
        t.join(30)
    out = capsys.readouterr().out
    assert "servers" in out and "load skew" in out
    for a in addresses:
        assert a in out
    assert "127.0.0.1:1:" in out  # named, not a crash


def test_top_names_an_address_that_is_not_a_metrics_endpoint_and_goes_on(cluster, capsys):
    """A server's gRPC port (not HTTP) and an HTTP page that is not Prometheus text."""
    import http.server
    import threading

    from cardinal import cli

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>hello world</html>")

        def log_message(self, *args):
            pass

    page = http.server.HTTPServer(("127.0.0.1", 0), Page)
    t = threading.Thread(target=page.serve_forever, daemon=True)
    t.start()
    try:
        grpc_port, metrics_port = cluster.servers[0].port, cluster.servers[0].metrics_port
        addresses = [f"127.0.0.1:{grpc_port}", f"127.0.0.1:{page.server_port}", f"127.0.0.1:{metrics_port}"]
        assert cli.main(["top", *addresses, "--once", "--interval", "0.2"]) == 0
    finally:
        page.shutdown()
        page.server_close()
    out = capsys.readouterr().out
    assert out.count("not a metrics endpoint") == 2 and f"127.0.0.1:{metrics_port}" in out


def test_latency_quantiles_from_histogram_buckets():
    from cardinal.jobs.top import Scrape, quantile

    def at(counts):
        s = Scrape("x", 0.0)
        for le, c in counts.items():
            s.samples[("cardinal_ps_request_seconds_bucket", frozenset({"le": le, "method": "Pull"}.items()))] = c
        return s

    before = at({"0.001": 0, "0.002": 0, "0.005": 0, "+Inf": 0})
    after = at({"0.001": 50, "0.002": 90, "0.005": 100, "+Inf": 100})  # 50 under 1 ms, 40 in 1-2, 10 in 2-5
    assert quantile(before, after, 0.5) == pytest.approx(0.001)
    assert quantile(before, after, 0.7) == pytest.approx(0.0015)
    assert quantile(before, after, 0.99) == pytest.approx(0.0047)
    assert quantile(after, after, 0.5) is None  # no calls between the scrapes


def test_the_dashboard_queries_only_metrics_that_exist(cluster, tmp_path):
    """Every series deploy/grafana-dashboard.json asks for is one a server or a worker serves."""
    import json
    import re
    from pathlib import Path

    from cardinal.train.live_metrics import WorkerMetrics

    cluster.client.pull("user", np.arange(10, dtype=np.int64), step=1).wait()
    worker = WorkerMetrics(0, "127.0.0.1", 0)
    try:
        worker.update(1, 10, 0.5, 100.0, {"compute": 1.0}, {"staleness_p99": 1.0})
        served = names(cluster.servers[0].metrics_port) | names(worker.port)
    finally:
        worker.close()
    dashboard = json.loads((Path(__file__).parents[2] / "deploy" / "grafana-dashboard.json").read_text())
    asked = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"cardinal_[a-z0-9_]+", t["expr"])}
    assert asked and asked <= served, sorted(asked - served)
