"""``[ps]``: the parameter servers and how to reach them (shards, addresses, the job's token,
TLS), with ``[ps.limits]`` (what one server accepts) and ``[ps.memory]`` (what its tables may
take). Where each table's rows live is ``[plan]``."""

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from cardinal.recipe.memory import MemoryConfig

JOB_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class LimitsConfig:
    """What one server accepts. Bytes and calls are read by gRPC before any check, so
    max_message_mb x max_concurrent_calls bounds the memory a flood of requests can take; the
    rows' limits hold on every transport, the embedded one too (cardinal/ps/limits.py)."""
    max_message_mb: int = field(default=16, metadata={
        "help": "cardinal server: largest request or reply; clients split larger ones"})
    max_concurrent_calls: int = field(default=16, metadata={
        "help": "cardinal server: more are refused (RESOURCE_EXHAUSTED) before they are read"})
    max_rows: int = field(default=64_000_000, metadata={
        "help": "rows of all tables on one shard; past it: RESOURCE_EXHAUSTED, nothing created"})
    max_new_rows_per_request: int = field(default=1 << 20, metadata={
        "help": "rows one pull may create; past it the pull is refused"})
    request_window: int = field(default=2048, metadata={"help": "request ids remembered per client (exactly-once)"})
    max_clients: int = field(default=1024, metadata={"help": "clients remembered at once..."})
    client_idle_s: float = field(default=600.0, metadata={"help": "...each until silent this long"})
    max_step_ahead: int = field(default=64, metadata={
        "help": "steps a training request may run past the newest step a server accepted; past it the request is "
                "refused (a step from the future would age every row at once)"})
    max_gradient: float = field(default=1e9, metadata={
        "help": "a push holding a gradient larger in magnitude is refused whole (as a non-finite one is): far past "
                "any sane gradient, while its square stays far inside float32 for the optimizers' accumulators "
                "(ps/limits.py)"})

    def __post_init__(self):
        if not 1 <= self.max_message_mb <= 2047:
            raise ValueError(f"ps.limits.max_message_mb must be in [1, 2047] (gRPC's limit is 2 GiB), "
                             f"got {self.max_message_mb}")
        if self.max_concurrent_calls < 1:
            raise ValueError(f"ps.limits.max_concurrent_calls must be >= 1, got {self.max_concurrent_calls}")
        for name in ("max_rows", "max_new_rows_per_request", "request_window", "max_clients", "client_idle_s",
                     "max_step_ahead", "max_gradient"):
            if not getattr(self, name) >= 1:  # StoreLimits checks them again; importing it here would import numba
                raise ValueError(f"ps.limits.{name} must be a number >= 1, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class PSConfig:
    shards: int = field(default=1, metadata={
        "help": "embedded shards (in this process); one is the fastest here (benchmarks/results/embedded_shards.md)"})
    concurrent: bool = field(default=True, metadata={
        "help": "embedded shards serve on threads of their own: pulls and pushes overlap compute"})
    lanes: int = field(default=0, metadata={
        "help": "threads the embedded shards' requests share (shard i on lane i % lanes; the same bits for any "
                "count); 0: one per 4 cores, at most one a shard"})
    inline: bool = field(default=True, metadata={
        "help": "with one lane (the default below 8 cores), a request sent while the lane is idle runs on the "
                "sender's thread: no hand-off (the same bits)"})
    servers: list[str] = field(default_factory=list, metadata={
        "help": "host:port of each shard's server; empty: embedded"})
    timeout_s: float = field(default=20.0, metadata={"help": "deadline of each call to a server"})
    job: str = field(default="cardinal", metadata={
        "help": "servers answer only requests of this job... (letters, digits, '.', '_', '-': a server with its own "
                "disk keeps the job's checkpoints under <--data-dir>/checkpoints/<job>)"})
    token_file: str = field(default="", metadata={"help": "...carrying this token (or $CARDINAL_TOKEN)"})
    tls_cert: str = field(default="", metadata={"help": "server certificate and key (PEM): TLS when given"})
    tls_key: str = field(default="", metadata={"help": "(goes with tls_cert)"})
    tls_ca: str = field(default="", metadata={"help": "what clients trust"})
    metrics_port: int = field(default=0, metadata={
        "help": "cardinal server: Prometheus metrics over HTTP on its --host (GET /metrics) at this port; 0: a free "
                "one, printed on its ready line (metrics=PORT); -1: none"})
    limits: LimitsConfig = field(default_factory=LimitsConfig, metadata={"help": "what one server accepts"})
    memory: MemoryConfig = field(default_factory=MemoryConfig, metadata={
        "help": "what one server's tables may take in RAM and on disk"})

    def __post_init__(self):
        if self.shards < 1:
            raise ValueError(f"ps.shards must be >= 1, got {self.shards}")
        if not 0 <= self.lanes <= self.shards:
            raise ValueError(f"ps.lanes must be 0 (one per 4 cores) to ps.shards ({self.shards}), got {self.lanes}")
        if not JOB_NAME.fullmatch(self.job):
            raise ValueError(f"ps.job must be 1-128 letters, digits, '.', '_' or '-', not starting with '.', got "
                             f"{self.job!r}: a server keeps the job's checkpoints in a directory of that name")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("ps.tls_cert and ps.tls_key go together")
        if not -1 <= self.metrics_port <= 65535:
            raise ValueError(f"ps.metrics_port must be a port, 0 (a free one) or -1 (none), got {self.metrics_port}")

    def token(self) -> str:
        """The job's token: $CARDINAL_TOKEN, else the contents of ps.token_file."""
        token = os.environ.get("CARDINAL_TOKEN") or (
            Path(self.token_file).read_text().strip() if self.token_file else "")
        if not token:
            raise ValueError("no job token: set CARDINAL_TOKEN or ps.token_file (servers refuse requests without one)")
        return token
