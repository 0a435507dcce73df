"""``[ps.memory]``: what one server's tables may take in RAM and on disk, and under it
``[ps.memory.admission]`` (which new ids get a row) and ``[ps.memory.eviction]`` (which rows
leave RAM past the budget)."""

import os
from dataclasses import dataclass, field

from cardinal.home import expand
from cardinal.recipe.admission import AdmissionConfig
from cardinal.recipe.eviction import EvictionConfig
from cardinal.recipe.numbers import parse_bytes


@dataclass(frozen=True)
class MemoryConfig:
    budget: int | str = field(default=0, metadata={
        "help": 'bytes all tables of one server may take (rows, index, admission filters), an int, "8GiB"-style or '
                '"50%" of this machine\'s memory; past it the lowest-scored rows are evicted ([ps.memory.eviction]), '
                "or moved to disk with disk_budget. Embedded shards share it equally. 0: no budget"})
    disk_budget: int | str = field(default=0, metadata={
        "help": "bytes of rows one server may keep in its disk tier (RocksDB): rows past budget go there and come "
                "back when used, bitwise the same run as all in RAM; past it, the disk tier's lowest-scored rows are "
                "evicted. 0: no disk tier (needs budget)"})
    disk_dir: str = field(default="$CARDINAL_HOME/tiers", metadata={
        "help": "where disk tiers make their (temporary) directories"})
    admission: AdmissionConfig = field(default_factory=AdmissionConfig, metadata={"help": "which new ids get a row"})
    eviction: EvictionConfig = field(default_factory=EvictionConfig, metadata={
        "help": "which rows go when a server passes ps.memory.budget; time to live"})

    def __post_init__(self):
        self.budget_bytes()
        if self.disk_bytes() and not self.budget_bytes():
            raise ValueError("ps.memory.disk_budget needs ps.memory.budget: rows go to disk when RAM is past its "
                             "budget")
        object.__setattr__(self, "disk_dir", expand(self.disk_dir))

    def budget_bytes(self) -> int:
        """ps.memory.budget in bytes (a share of the machine's memory resolved here)."""
        value = self.budget
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                share = float(value.strip()[:-1]) / 100
            except ValueError:
                share = -1.0
            if not 0 < share <= 1:
                raise ValueError(f"ps.memory.budget as a share must be in (0%, 100%], got {value!r}")
            return int(share * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        return parse_bytes(value, "ps.memory.budget")

    def disk_bytes(self) -> int:
        """ps.memory.disk_budget in bytes."""
        return parse_bytes(self.disk_budget, "ps.memory.disk_budget")
