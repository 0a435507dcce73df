"""A worker's Prometheus endpoint (``metrics.port``): where a running job's time goes.

    live = WorkerMetrics(rank=0, host="127.0.0.1", port=0)    # prints where it listens
    live.update(step=120, samples=491520, loss=0.45, samples_per_s=41000.0,
                seconds={"data": 0.8, "dedup": 1.1, "pull_wait": 0.4, "compute": 6.2, "push": 0.3},
                gauges={"staleness_p99": 1.0, "cache_emb_hit_rate_unique": 0.41})

The trainer calls ``update`` at its log steps (``metrics.log_every``), with what it writes to
metrics.jsonl, so a worker pays nothing per step for being watched; a scrape reads the last
snapshot. Series start ``cardinal_worker_`` and carry the worker's rank: steps and samples as
counters, ``seconds_total{part}`` (the step time split: data, dedup, pull_wait, compute, push,
h2d, baseline; ``rate()`` of each over their sum is its share), loss, samples/s, staleness and
cache hit rates as gauges.
"""

import re
import threading

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from cardinal.metrics_http import MetricsServer


class WorkerMetrics:
    def __init__(self, rank: int, host: str, port: int):
        self.rank = str(rank)
        self._lock = threading.Lock()
        self._snapshot: dict = {"step": 0, "samples": 0, "seconds": {}, "gauges": {}}
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self.server = MetricsServer(self.registry, host, port)  # read timeouts, a connection cap, one thread
        self.port = self.server.port
        print(f"worker {rank} metrics on http://{host}:{self.port}/metrics", flush=True)

    def update(self, step: int, samples: int, loss: float, samples_per_s: float, seconds: dict, gauges: dict) -> None:
        with self._lock:
            self._snapshot = {"step": step, "samples": samples, "seconds": dict(seconds),
                              "gauges": {"loss": loss, "samples_per_s": samples_per_s, **gauges}}

    def collect(self):
        with self._lock:
            s = self._snapshot
        labels, rank = ["worker"], [self.rank]
        for name, doc, value in (("steps", "training steps done", s["step"]),
                                 ("samples", "examples trained on by this worker", s["samples"])):
            c = CounterMetricFamily(f"cardinal_worker_{name}", doc, labels=labels)
            c.add_metric(rank, value)
            yield c
        split = CounterMetricFamily("cardinal_worker_seconds", "seconds of training time, by where they went",
                                    labels=labels + ["part"])
        for part, seconds in sorted(s["seconds"].items()):
            split.add_metric(rank + [part], seconds)
        yield split
        for key, value in sorted(s["gauges"].items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                g = GaugeMetricFamily(f"cardinal_worker_{_name(key)}", key.replace("_", " "), labels=labels)
                g.add_metric(rank, value)
                yield g

    def close(self) -> None:
        self.server.close()


def _name(key: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)
