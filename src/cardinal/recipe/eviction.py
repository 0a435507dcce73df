"""``[ps.memory.eviction]``: which rows leave RAM when a server passes ps.memory.budget, and the
rows' time to live. Plain dataclasses, as ``admission.py``; the store's ``Memory``
(``ps/memory.py``) and policies (``embedding/eviction.py``) read them."""

import math
from dataclasses import dataclass, field

from cardinal.recipe.numbers import check_int

EVICTION_POLICIES = ("lru", "lfu", "l2", "decayed")
KEY = "ps.memory.eviction"


@dataclass(frozen=True)
class EvictionConfig:
    policy: str = field(default="lru", metadata={
        "help": 'which rows go first when a server passes ps.memory.budget: "lru" (least recently used), "lfu" '
                '(least often), "l2" (smallest values) or "decayed" (a count of sightings that fades with age)'})
    decay: float = field(default=0.99, metadata={"help": "decayed: the weight a sighting keeps per step of age"})
    ttl_steps: int = field(default=0, metadata={
        "help": "delete rows not pulled or pushed for this many steps (0: never)"})
    ttl_seconds: float = field(default=0.0, metadata={
        "help": "... or for this many seconds by the server's clock (0: never)"})
    every: int = field(default=100, metadata={"help": "steps between time-to-live sweeps"})
    protect_steps: int = field(default=2, metadata={
        "help": "rows touched in the last this many steps are never evicted (they may be in flight): new rows they "
                "leave no room for are refused, or, with a disk tier, they go to it"})

    def __post_init__(self):
        if self.policy not in EVICTION_POLICIES:
            raise ValueError(f"{KEY}.policy must be one of {list(EVICTION_POLICIES)}, got {self.policy!r}")
        if not 0 < self.decay <= 1:
            raise ValueError(f"{KEY}.decay must be in (0, 1], got {self.decay!r}")
        check_int(self.ttl_steps, f"{KEY}.ttl_steps", 0, 2**32 - 1)
        check_int(self.every, f"{KEY}.every", 1, 2**32 - 1)
        check_int(self.protect_steps, f"{KEY}.protect_steps", 0, 2**32 - 1)
        if not (isinstance(self.ttl_seconds, (int, float)) and 0 <= self.ttl_seconds < math.inf):
            raise ValueError(f"{KEY}.ttl_seconds must be a number >= 0, got {self.ttl_seconds!r}")
