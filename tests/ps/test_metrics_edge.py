"""The metrics endpoints (a parameter server's, a worker's) against hostile clients over raw sockets
on 127.0.0.1: half-sent requests are closed after the read timeout, connections past the cap go,
a real scrape is answered beside them, and one thread serves them all."""

import threading

from cardinal.embedding import TableConfig
from cardinal.netguard import HttpLimits
from cardinal.ps import ShardStore, StoreConfig
from cardinal.ps.server.metrics import ShardMetrics
from cardinal.train.live_metrics import WorkerMetrics
from helpers.raw_http import ask, closed, half_sent, poll_for, sockets

HALF = b"GET /metrics HTTP/1.1\r\nHo"


def test_a_servers_metrics_endpoint_closes_half_sent_requests_with_one_thread():
    metrics = ShardMetrics(ShardStore(StoreConfig((TableConfig("user", 8, seed=1),)), 0, 1))
    threads = threading.active_count()
    port = metrics.serve("127.0.0.1", 0, HttpLimits(header_timeout_s=1, max_connections=50))
    try:
        with sockets() as opened:
            half_sent(port, opened, 200, HALF)
            assert threading.active_count() <= threads + 1  # prometheus_client's server: a thread each, held
            status, text = ask(port, "GET", "/metrics", timeout=10)  # answered beside them
            assert status == 200 and b"cardinal_ps_rows" in text
            assert sum(closed(s) for s in opened) >= 150  # past the cap of 50, the longest-waiting went
            took = poll_for(lambda: all([closed(s) for s in opened]), 10, "the endpoint to close them all")
            assert took < 6
    finally:
        metrics.close()


def test_a_workers_metrics_endpoint_holds_one_thread_for_many_connections(capsys):
    threads = threading.active_count()
    live = WorkerMetrics(rank=0, host="127.0.0.1", port=0)
    try:
        with sockets() as opened:
            half_sent(live.port, opened, 200, HALF)
            assert threading.active_count() <= threads + 1
            status, text = ask(live.port, "GET", "/metrics", timeout=10)
            assert status == 200 and b"cardinal_worker_steps" in text
    finally:
        live.close()
