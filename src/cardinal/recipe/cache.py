"""``[cache]``: the worker cache of hot rows (off by default)."""

from dataclasses import dataclass, field

from cardinal.recipe.numbers import parse_bytes


@dataclass(frozen=True)
class CacheConfig:
    bytes: int | str = field(default=0, metadata={
        "help": 'the worker cache of hot rows (worker/sources/cache.py): its size, an int or "64MiB"-style; 0: no '
                "cache. Sync and async consistency only (geo keeps a replica)"})
    staleness: int = field(default=2, metadata={
        "help": "s: a cached row is read at most s updates behind its server, and a worker holds at most s unpushed "
                "updates of a row (0 in sync mode: bitwise as no cache; on the default recipe, 2 workers: s=2 cost "
                "0.0015 AUC, s=4 0.004; benchmarks/cache.py)"})
    policy: str = field(default="lru", metadata={
        "help": 'eviction when full: "lru" (least recently used) or "lfu" (least often used)'})
    admit_after: int = field(default=1, metadata={
        "help": "a row is cached once pulled this many times (counted in a small sketch)"})
    device: str = field(default="auto", metadata={
        "help": 'where cached rows live: "cpu", "cuda", or "auto" (the worker\'s device)'})

    def __post_init__(self):
        parse_bytes(self.bytes, "cache.bytes")
        if self.staleness < 0:
            raise ValueError(f"cache.staleness must be >= 0, got {self.staleness}")
        if self.policy not in ("lru", "lfu"):
            raise ValueError(f"cache.policy must be 'lru' or 'lfu', got {self.policy!r}")
        if self.admit_after < 0:
            raise ValueError(f"cache.admit_after must be >= 0, got {self.admit_after}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"cache.device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")

    @property
    def capacity(self) -> int:
        """cache.bytes as a number of bytes."""
        return parse_bytes(self.bytes, "cache.bytes")
