"""``[cache]``: the worker cache of hot rows (off by default)."""

from dataclasses import dataclass, field

from cardinal.recipe.numbers import parse_bytes

MAX_HOLD = 2  # held sums of more steps cost more AUC than the cache may (hold's help)


@dataclass(frozen=True)
class CacheConfig:
    bytes: int | str = field(default=0, metadata={
        "help": 'the worker cache of hot rows (worker/sources/cache.py): its size, an int or "64MiB"-style; 0: no '
                "cache. Sync and async consistency only (geo keeps a replica)"})
    staleness: int = field(default=2, metadata={
        "help": "s: a cached row is read at most s updates behind its server, moved by this worker's own gradients "
                "since it was fetched (0 in sync mode: bitwise as no cache; on the default recipe, 2 workers: s = 1, "
                "2, 4 within 0.0001 AUC; on 200k rows 0.0014, 0.0024, 0.0027; benchmarks/cache.py)"})
    hold: int = field(default=0, metadata={
        "help": "h: a cached row's gradients are summed on the worker and pushed once every h + 1 steps, one "
                "counted update: fewer bytes, but the servers take the sum's second moment as equal parts', which "
                "speeds held rows up (on the default recipe, s = 4: h = 2 cost 0.0015 AUC at 0.56 of the bytes, h = 0 "
                "0.0001 at 0.77; h = 4 0.0022, refused). At most cache.staleness and 2; 0: each goes out at once"})
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
        if not 0 <= self.hold <= self.staleness:
            raise ValueError(f"cache.hold must be in [0, cache.staleness = {self.staleness}], got {self.hold} (a held "
                             "gradient leaves its row's servers a step behind)")
        if self.hold > MAX_HOLD:
            raise ValueError(f"cache.hold = {self.hold} is past {MAX_HOLD}: the servers take a held sum's second moment "
                             "as that of equal parts, and sums of 5 steps (hold 4) cost 0.0022 AUC on the default "
                             f"recipe with 2 workers (benchmarks/cache.py); use cache.hold <= {MAX_HOLD}")
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
