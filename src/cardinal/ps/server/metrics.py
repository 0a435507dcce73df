"""Prometheus metrics of one parameter server, served over HTTP beside its gRPC port.

    metrics = ShardMetrics(store)
    metrics.observe("Pull", "emb", "OK", seconds=0.0012, rows=4096)   # by the servicer, every call
    port = metrics.serve("127.0.0.1", 0)                               # GET http://host:port/metrics

What calls did is counted as they happen (one counter and one histogram per method and table;
refusals by their status code, the reason a client sees). What the store holds (rows, bytes,
creations, evictions by reason, admission refusals, the disk tier, copies of hot rows, request-log
clients, the step) is read from ``store.stats()`` when scraped, so a scrape costs the server nothing between
scrapes. Names start ``cardinal_ps_``; every series carries the shard. Load skew is a query over
servers (max over mean of request rates), in ``deploy/grafana-dashboard.json`` and ``cardinal top``.
"""

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from cardinal.metrics_http import MetricsServer
from cardinal.netguard import HttpLimits

LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class ShardMetrics:
    def __init__(self, store):
        self.store = store
        r = self.registry = CollectorRegistry()
        shard = str(store.shard)
        labels = ["shard", "method", "table"]
        self._requests = Counter("cardinal_ps_requests", "calls answered, by method, table and status code",
                                 labels + ["code"], registry=r)
        self._seconds = Histogram("cardinal_ps_request_seconds", "time a call took inside this server",
                                  labels, buckets=LATENCY_BUCKETS, registry=r)
        self._rows = Counter("cardinal_ps_request_rows", "ids in the calls (pulled rows, pushed gradients)",
                             labels, registry=r)
        self._shard = shard
        r.register(_StoreCollector(store, shard))
        self.server = None

    def observe(self, method: str, table: str, code: str, seconds: float, rows: int) -> None:
        self._requests.labels(self._shard, method, table, code).inc()
        self._seconds.labels(self._shard, method, table).observe(seconds)
        if rows:
            self._rows.labels(self._shard, method, table).inc(rows)

    def serve(self, host: str, port: int, limits: HttpLimits = HttpLimits()) -> int:
        """Start the HTTP endpoint on a thread of its own; returns the port (``port`` 0: a free one)."""
        self.server = MetricsServer(self.registry, host, port, limits)
        return self.server.port

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


class _StoreCollector:
    """The store's own account, read at each scrape."""

    def __init__(self, store, shard: str):
        self.store, self.shard = store, shard

    def collect(self):
        s = self.store.stats()
        per_table = {"rows": GaugeMetricFamily("cardinal_ps_rows", "rows held (RAM and disk)", labels=["shard", "table"]),
                     "bytes": GaugeMetricFamily("cardinal_ps_bytes", "bytes held in RAM", labels=["shard", "table"]),
                     "disk_rows": GaugeMetricFamily("cardinal_ps_disk_rows", "rows on the disk tier",
                                                    labels=["shard", "table"]),
                     "disk_bytes": GaugeMetricFamily("cardinal_ps_disk_bytes", "bytes on the disk tier",
                                                     labels=["shard", "table"])}
        counters = {"created": CounterMetricFamily("cardinal_ps_created_rows", "rows made by training pulls",
                                                   labels=["shard", "table"]),
                    "refused": CounterMetricFamily("cardinal_ps_admission_refused", "sightings of ids the admission "
                                                   "filter did not admit", labels=["shard", "table"]),
                    "dropped": CounterMetricFamily("cardinal_ps_admission_dropped", "gradient rows of ids without a "
                                                   "row, dropped", labels=["shard", "table"]),
                    "faulted": CounterMetricFamily("cardinal_ps_disk_faulted_rows", "rows read back from disk",
                                                   labels=["shard", "table"]),
                    "demoted": CounterMetricFamily("cardinal_ps_disk_demoted_rows", "rows written out to disk",
                                                   labels=["shard", "table"])}
        evicted = CounterMetricFamily("cardinal_ps_evicted_rows", "rows deleted, by reason", labels=["shard", "table",
                                                                                                     "reason"])
        for name, t in s["tables"].items():
            for key, family in per_table.items():
                family.add_metric([self.shard, name], t[key])
            for key, family in counters.items():
                family.add_metric([self.shard, name], t[key])
            for reason, n in t["evicted"].items():
                evicted.add_metric([self.shard, name, reason], n)
        copies = {"reads": CounterMetricFamily("cardinal_ps_copied_reads", "ids read from this server's copies of "
                                               "another server's hot rows", labels=["shard", "table"]),
                  "stale": CounterMetricFamily("cardinal_ps_copied_stale", "ids asked of copies older than their "
                                               "bound (read from their own server instead)", labels=["shard", "table"]),
                  "refreshed": CounterMetricFamily("cardinal_ps_copies_refreshed", "copies written by refreshes",
                                                   labels=["shard", "table"])}
        for c in s["replicas"].values():
            for key, family in copies.items():
                family.add_metric([self.shard, c["table"]], c[key])
        yield from per_table.values()
        yield from counters.values()
        yield evicted
        yield from copies.values() if s["replicas"] else ()
        yield _gauge("cardinal_ps_step", "the newest training step this server saw", self.shard, s["step"])
        yield _gauge("cardinal_ps_memory_budget_bytes", "ps.memory.budget (0: none)", self.shard, s["memory_budget"])
        yield _gauge("cardinal_ps_request_log_entries", "request ids remembered (exactly-once pushes)",
                     self.shard, len(self.store.requests))


def _gauge(name: str, doc: str, shard: str, value) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=["shard"])
    g.add_metric([shard], value)
    return g
