"""``[metrics]``: what a run reports while it trains: metrics.jsonl's cadence, TensorBoard, and
each worker's Prometheus endpoint."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MetricsConfig:
    log_every: int = field(default=10, metadata={"help": "steps between lines of metrics.jsonl"})
    tensorboard: bool = field(default=False, metadata={
        "help": "also write loss, samples/s, eval AUC and logloss for TensorBoard (RUN_DIR/tensorboard; needs "
                "`pip install tensorboard`)"})
    port: int = field(default=-1, metadata={
        "help": "each worker serves Prometheus metrics (GET /metrics) at this port + its rank, updated every "
                "log_every steps; 0: a free port (printed); -1: none"})
    host: str = field(default="127.0.0.1", metadata={
        "help": "where workers' metrics listen (0.0.0.0: every interface, for a scraper elsewhere)"})

    def __post_init__(self):
        if self.log_every < 1:
            raise ValueError(f"metrics.log_every must be >= 1, got {self.log_every}")
        if not -1 <= self.port <= 65535:
            raise ValueError(f"metrics.port must be a port, 0 (a free one) or -1 (none), got {self.port}")
