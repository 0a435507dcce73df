"""The recipe's settings for tables that outgrow memory: admission and eviction.

Plain dataclasses with no numpy or numba, so that recipes load (and errors print) fast; the
store builds its filters (``embedding/admission``) and its ``Memory`` (``ps/memory.py``) from them.
"""

import math
from dataclasses import asdict, dataclass, field, fields

ADMISSION_POLICIES = ("none", "count", "bloom", "probability")
EVICTION_POLICIES = ("lru", "lfu", "l2", "decayed")


@dataclass(frozen=True)
class AdmissionConfig:
    policy: str = "none"          # which new ids get a row: "none" (every id at once), "count" (exact counts),
                                  # "bloom" (a counting Bloom filter: bounded memory) or "probability" (Monolith's:
                                  # each sighting admits with `probability`); an id not admitted reads zeros
    threshold: int = 2            # count, bloom: the sighting on which an id gets a row (bloom: at most 255)
    probability: float = 0.25     # probability: the chance that one sighting admits an id
    bloom_bytes: int = 4 << 20    # bloom: one-byte counters per table per shard
    seed: int = 0                 # bloom, probability: of the hashes and coins
    tables: dict = field(default_factory=dict)  # per-table changes, {table = {key = value}}: e.g.
                                  # 'admission.tables.emb.threshold=5'; a baseline table lr_X follows X

    def __post_init__(self):
        if self.policy not in ADMISSION_POLICIES:
            raise ValueError(f"admission.policy must be one of {list(ADMISSION_POLICIES)}, got {self.policy!r}")
        _check_int(self, "threshold", 1, 255 if self.policy == "bloom" else 2**32 - 1)
        if not 0 < self.probability <= 1:
            raise ValueError(f"admission.probability must be in (0, 1], got {self.probability!r}")
        _check_int(self, "bloom_bytes", 64, 2**40)
        _check_int(self, "seed", 0, 2**63 - 1)
        if not isinstance(self.tables, dict):
            raise ValueError(f"admission.tables must be a table of tables, got {self.tables!r}")
        for name, changes in self.tables.items():
            self.for_table(name)

    def for_table(self, name: str) -> "AdmissionConfig":
        """The settings of table ``name``: these, with its entry of ``tables`` applied."""
        changes = self.tables.get(name, {})
        if not isinstance(changes, dict):
            raise ValueError(f"admission.tables.{name} must be a table of settings, got {changes!r}")
        known = {f.name for f in fields(self)} - {"tables"}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown setting admission.tables.{name}.{unknown[0]}; it takes {sorted(known)}")
        if not changes:
            return AdmissionConfig(**{**asdict(self), "tables": {}})
        return AdmissionConfig(**{**asdict(self), **changes, "tables": {}})


@dataclass(frozen=True)
class EvictionConfig:
    policy: str = "lru"           # which rows go first when a server passes ps.memory_budget: "lru" (least
                                  # recently used), "lfu" (least often), "l2" (smallest values) or "decayed"
                                  # (a count of sightings that fades with age)
    decay: float = 0.99           # decayed: the weight a sighting keeps per step of age
    ttl_steps: int = 0            # delete rows not pulled or pushed for this many steps (0: never)
    ttl_seconds: float = 0.0      # ... or for this many seconds by the server's clock (0: never)
    every: int = 100              # steps between time-to-live sweeps
    protect_steps: int = 2        # rows touched in the last this many steps are never evicted (they may be in flight):
                                  # new rows they leave no room for are refused, or, with a disk tier, they go to it

    def __post_init__(self):
        if self.policy not in EVICTION_POLICIES:
            raise ValueError(f"eviction.policy must be one of {list(EVICTION_POLICIES)}, got {self.policy!r}")
        if not 0 < self.decay <= 1:
            raise ValueError(f"eviction.decay must be in (0, 1], got {self.decay!r}")
        _check_int(self, "ttl_steps", 0, 2**32 - 1)
        _check_int(self, "every", 1, 2**32 - 1)
        _check_int(self, "protect_steps", 0, 2**32 - 1)
        if not (isinstance(self.ttl_seconds, (int, float)) and 0 <= self.ttl_seconds < math.inf):
            raise ValueError(f"eviction.ttl_seconds must be a number >= 0, got {self.ttl_seconds!r}")


def _check_int(config, name: str, least: int, most: int) -> None:
    value = getattr(config, name)
    section = type(config).__name__.removesuffix("Config").lower()
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        raise ValueError(f"{section}.{name} must be an integer in [{least}, {most}], got {value!r}")
