"""``cardinal top ADDRESS ...``: a running job's servers and workers, refreshed in the terminal.

Each ADDRESS is a metrics endpoint, ``host:port``: a server's (``ps.metrics_port``, printed on its
ready line as ``metrics=PORT``) or a worker's (``metrics.port``). Every ``--interval``
seconds each is scraped; rates come from the difference between two scrapes:

    servers: calls/s and ids/s, p50 and p99 call latency over the interval (from the histogram's
             buckets), refused calls/s, rows and MB held; load skew = the busiest server's calls/s
             (and bytes) over the mean: 1.0 is perfectly balanced
    workers: step, samples/s, loss, where the time went (data, dedup, pull wait, compute, push),
             staleness p99 and cache hit rate

``--once`` prints one frame (after one interval) and exits: for scripts and logs.
"""

import http.client
import time
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

PARTS = ("data", "dedup", "pull_wait", "compute", "push")


@dataclass
class Scrape:
    address: str
    at: float
    samples: dict = field(default_factory=dict)  # (name, frozenset(labels)) -> value
    error: str = ""

    def sum(self, name: str, **labels) -> float:
        return sum(v for (n, ls), v in self.samples.items() if n == name and set(labels.items()) <= ls)

    def labels(self, name: str, key: str) -> set[str]:
        return {dict(ls)[key] for (n, ls) in self.samples if n == name and key in dict(ls)}

    @property
    def kind(self) -> str:
        names = {n for n, _ in self.samples}
        return "server" if "cardinal_ps_step" in names else "worker" if "cardinal_worker_steps_total" in names else ""


def scrape(address: str, timeout: float = 5.0) -> Scrape:
    """One endpoint's samples; whatever goes wrong (unreachable, not HTTP, not Prometheus text) is
    ``error``, so one bad address never stops the view of the others."""
    url = address if address.startswith(("http://", "https://")) else f"http://{address}/metrics"
    s = Scrape(address, time.monotonic())
    try:
        text = urllib.request.urlopen(url, timeout=timeout).read().decode()
        s.samples = {(x.name, frozenset(x.labels.items())): x.value
                     for family in text_string_to_metric_families(text) for x in family.samples}
    except OSError as e:
        s.error = str(getattr(e, "reason", e))
    except (http.client.HTTPException, ValueError) as e:  # a gRPC port, an HTML page...
        s.error = f"not a metrics endpoint ({type(e).__name__})"
    return s


def quantile(before: Scrape, after: Scrape, q: float) -> float | None:
    """The q-quantile (seconds) of the calls between two scrapes, from the latency histogram's buckets."""
    name = "cardinal_ps_request_seconds_bucket"
    bounds = sorted({float(b) for b in after.labels(name, "le")})
    counts = [after.sum(name, le=_le(b)) - before.sum(name, le=_le(b)) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank, lo, below = q * counts[-1], 0.0, 0.0
    for bound, count in zip(bounds, counts):
        if count >= rank:
            if bound == float("inf"):
                return lo
            return lo + (bound - lo) * (rank - below) / max(count - below, 1e-12)
        lo, below = bound, count
    return lo


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def server_rows(pairs: list[tuple[Scrape, Scrape]]) -> tuple[list[dict], dict]:
    rows = []
    for before, after in pairs:
        dt = max(after.at - before.at, 1e-9)
        calls = (after.sum("cardinal_ps_requests_total") - before.sum("cardinal_ps_requests_total")) / dt
        refused = calls - (after.sum("cardinal_ps_requests_total", code="OK")
                           - before.sum("cardinal_ps_requests_total", code="OK")) / dt
        ids = (after.sum("cardinal_ps_request_rows_total") - before.sum("cardinal_ps_request_rows_total")) / dt
        p50, p99 = quantile(before, after, 0.5), quantile(before, after, 0.99)
        rows.append({"server": after.address, "shard": ",".join(sorted(after.labels("cardinal_ps_step", "shard"))),
                     "calls/s": calls, "ids/s": ids, "p50 ms": None if p50 is None else p50 * 1e3,
                     "p99 ms": None if p99 is None else p99 * 1e3, "refused/s": refused,
                     "rows": after.sum("cardinal_ps_rows"), "MB": after.sum("cardinal_ps_bytes") / 1e6,
                     "step": after.sum("cardinal_ps_step")})
    return rows, {"calls": _skew([r["calls/s"] for r in rows]), "bytes": _skew([r["MB"] for r in rows])}


def worker_rows(pairs: list[tuple[Scrape, Scrape]]) -> list[dict]:
    rows = []
    for before, after in pairs:
        spent = {p: after.sum("cardinal_worker_seconds_total", part=p) - before.sum("cardinal_worker_seconds_total", part=p)
                 for p in after.labels("cardinal_worker_seconds_total", "part")}
        total = sum(spent.values()) or 1.0
        hits = [v for (n, _), v in after.samples.items() if n.endswith("hit_rate_accesses")]
        rows.append({"worker": after.address, "rank": ",".join(sorted(after.labels("cardinal_worker_steps_total",
                                                                                     "worker"))),
                     "step": after.sum("cardinal_worker_steps_total"),
                     "samples/s": after.sum("cardinal_worker_samples_per_s"), "loss": after.sum("cardinal_worker_loss"),
                     **{f"{p} %": 100 * spent.get(p, 0.0) / total for p in PARTS},
                     "staleness p99": after.sum("cardinal_worker_staleness_p99"),
                     "cache hit": sum(hits) / len(hits) if hits else None})
    return rows


def _skew(values: list[float]) -> float | None:
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else None


def frame(before: list[Scrape], after: list[Scrape]):
    """One screen: a rich Group of the servers' table, the workers' table and what failed."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    pairs = list(zip(before, after))
    servers, skew = server_rows([p for p in pairs if p[1].kind == "server"])
    workers = worker_rows([p for p in pairs if p[1].kind == "worker"])
    parts = []
    for title, rows in ((f"servers  (load skew: calls {_fmt(skew['calls'])}, bytes {_fmt(skew['bytes'])})", servers),
                        ("workers", workers)):
        if not rows:
            continue
        table = Table(title=title, title_justify="left")
        for key in rows[0]:
            table.add_column(key, justify="left" if key in ("server", "worker") else "right")
        for row in rows:
            table.add_row(*(_fmt(v) for v in row.values()))
        parts.append(table)
    for s in after:
        if s.error or not s.kind:
            parts.append(Text(f"{s.address}: {s.error or 'not a cardinal metrics endpoint'}", style="red"))
    return Group(*parts)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"
    return str(v)


def run(addresses: list[str], interval: float = 1.0, once: bool = False) -> int:
    from rich.console import Console
    from rich.live import Live

    if interval <= 0:
        raise ValueError(f"--interval must be > 0, got {interval}")
    console = Console()
    if not console.is_terminal:  # a pipe or a log: wide enough for every column, not 80
        console = Console(width=200)
    before = [scrape(a) for a in addresses]
    if once:
        time.sleep(interval)
        console.print(frame(before, [scrape(a) for a in addresses]))
        return 0
    with Live(console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval)
                after = [scrape(a) for a in addresses]
                live.update(frame(before, after), refresh=True)
                before = after
        except KeyboardInterrupt:
            return 0
