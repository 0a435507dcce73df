"""One parameter server process: a shard store behind gRPC, with the standard health service.

    cardinal server --shard 0/4 --port 7000 --data-dir /data/ps0 --recipe criteo_synthetic

It listens on 127.0.0.1 unless told ``--host``, prints one machine-readable line once it
listens (``CARDINAL_SERVER_READY shard=0/4 port=7000 incarnation=... metrics=9100``; port 0 picks
a free port; ``metrics``: its Prometheus endpoint, ``ps.metrics_port``), and on SIGTERM or SIGINT stops taking calls, lets calls in flight finish, and exits 0.
Checkpoint paths in requests are relative to ``--data-dir`` and may not leave it.

A server is part of one job (``ps.job``) and ends with it: after the job's final checkpoint the
workers' rank 0 sends ``Finish`` (authenticated like every request, ``servicer.py``), and the
server answers, refuses anything else, and exits 0 as on SIGTERM. Why not serve the next job:
its tables would start as the last job's rows, clocks and logs, and clearing them on a handshake
is one more state to get right; a fresh process has none (``cardinal launch`` starts and stops
its servers with the job, and Kubernetes runs them as a Job: ``deploy/kubernetes.yaml``). A
worker that crashes sends nothing, so the servers stay up for the job's restart and resume.
"""

import logging
import signal
import threading
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from cardinal.ps.server.metrics import ShardMetrics
from cardinal.ps.server.process_memory import requests
from cardinal.ps.server.servicer import ShardServicer
from cardinal.ps.server.store import ShardStore
from cardinal.ps.transport import heap, wire

READY = "CARDINAL_SERVER_READY"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerOptions:
    """How a server listens and how much it reads at once: calls beyond ``max_concurrency`` are
    refused (RESOURCE_EXHAUSTED) before they are read, so at most about max_concurrency x
    max_message_mb of requests are in memory (16 x 16 MiB by default); gRPC's own buffers come
    on top (see benchmarks/server_flood.py for what a flood costs)."""

    host: str = "127.0.0.1"
    port: int = 0
    max_message_mb: int = 16
    max_concurrency: int = 16     # calls beyond this get RESOURCE_EXHAUSTED
    threads: int = 8
    grace_s: float = 30.0
    tls_cert: str | None = None   # PEM files: TLS when both are given
    tls_key: str | None = None
    metrics_port: int = -1        # Prometheus metrics over HTTP on ``host`` (server/metrics.py): 0 a free port; -1 none


class ShardServer:
    def __init__(self, store: ShardStore, data_dir: str | Path, job: str, token: str, options: ServerOptions):
        self.store, self.options = store, options
        heap.keep_freed_buffers(store.limits.memory_budget)  # first, so that under a budget it keeps less
        threads, calls, limit = requests(store.limits.memory_budget, options.threads, options.max_concurrency,
                                         options.max_message_mb << 20)  # under a budget: less (process_memory.py)
        self.server = grpc.server(futures.ThreadPoolExecutor(threads, thread_name_prefix="cardinal-rpc"),
                                  maximum_concurrent_rpcs=calls,
                                  options=[("grpc.max_receive_message_length", limit),
                                           ("grpc.max_send_message_length", limit)])
        self.metrics = ShardMetrics(store) if options.metrics_port >= 0 else None
        servicer = ShardServicer(store, data_dir, job, token, limit, self.metrics, calls)
        self.ended = servicer.ended  # set when the job finished (Finish)
        self.held = servicer.held  # clients' held calls, ended first when it stops
        self.server.add_generic_rpc_handlers((servicer.handler(),))
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        address = f"{options.host}:{options.port}"
        if options.tls_cert and options.tls_key:
            creds = grpc.ssl_server_credentials([(Path(options.tls_key).read_bytes(), Path(options.tls_cert).read_bytes())])
            self.port = self.server.add_secure_port(address, creds)
        else:
            self.port = self.server.add_insecure_port(address)
        if self.port == 0:
            raise ValueError(f"cannot listen on {address}")
        self._stopped = threading.Event()
        self.metrics_port: int | None = None

    def start(self) -> "ShardServer":
        if self.store.limits.memory_budget:  # free pages inside the heap go back to the kernel (heap.py)
            threading.Thread(target=self._trim, name="cardinal-trim", daemon=True).start()
        if self.metrics is not None:
            self.metrics_port = self.metrics.serve(self.options.host, self.options.metrics_port)
        self.server.start()
        for name in ("", wire.SERVICE):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        return self

    def stop(self, grace: float | None = None) -> None:
        """Refuse new calls, let calls in flight finish (up to ``grace`` seconds), stop."""
        self.health.enter_graceful_shutdown()
        self.held.end()
        self.server.stop(self.options.grace_s if grace is None else grace).wait()
        if self.metrics is not None:
            self.metrics.close()
        self._stopped.set()

    def _trim(self) -> None:
        while not self._stopped.wait(heap.TRIM_EVERY_S):
            heap.trim()

    def wait(self) -> None:
        self._stopped.wait()


def run(store: ShardStore, data_dir: str | Path, job: str, token: str, options: ServerOptions) -> int:
    """Serve until the job finishes, or SIGTERM or SIGINT; returns the exit code."""
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    server = ShardServer(store, data_dir, job, token, options).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    metrics = f" metrics={server.metrics_port}" if server.metrics_port is not None else ""
    print(f"{READY} shard={store.shard}/{store.n_shards} host={options.host} port={server.port} "
          f"incarnation={store.incarnation}{metrics}", flush=True)
    while not server.ended.wait(0.1) and not stop.is_set():
        pass
    log.info("shard %d: stopping (calls in flight may finish)", store.shard)
    server.stop()
    store.close()  # the disk tier's RocksDB closed now, not by a finalizer while the interpreter ends
    return 0
