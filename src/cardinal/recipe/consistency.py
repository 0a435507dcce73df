"""``[consistency]``: what a worker's pull sees of the pushes before it, and a sub-table per mode
holding only what that mode reads, so that a knob the run would ignore cannot be set:

    [consistency]        mode, max_in_flight (sync and async: the pushes a worker keeps in flight)
    [consistency.sync]   combine
    [consistency.async]  staleness, combine, compensation
    [consistency.geo]    interval

A sub-table of a mode the run does not train in must keep its defaults (an error names the key
and the mode). "auto" is sync or async by the job (``resolve``): both sub-tables may be set, and
the one of the mode it does not resolve to is refused there, before anything runs.
"""

from dataclasses import dataclass, field, fields

MODES = ("auto", "sync", "async", "geo")
MAX_IN_FLIGHT = 4
COMBINE_HELP = ("several workers: servers apply each step's pushes of all workers as one update (what one process "
                "computes); false: each worker's push applies on arrival")


@dataclass(frozen=True)
class SyncConfig:
    combine: bool = field(default=True, metadata={"help": COMBINE_HELP})


@dataclass(frozen=True)
class AsyncConfig:
    staleness: int = field(default=1, metadata={
        "help": "a pull sees every push but those of the last `staleness` steps; with 1, the next batch's pull "
                "overlaps this step (prefetch)"})
    combine: bool = field(default=True, metadata={"help": COMBINE_HELP})
    compensation: str = field(default="none", metadata={
        "help": 'several workers: "lr" divides a push\'s sparse lr by its rows\' staleness'})

    def __post_init__(self):
        if self.staleness < 0:
            raise ValueError(f"consistency.async.staleness must be >= 0, got {self.staleness}")
        if self.compensation not in ("none", "lr"):
            raise ValueError(f"consistency.async.compensation must be 'none' or 'lr', got {self.compensation!r}")


@dataclass(frozen=True)
class GeoConfig:
    interval: int = field(default=4, metadata={
        "help": "rows train on the worker; their changes are pushed every this many steps"})

    def __post_init__(self):
        if self.interval < 1:
            raise ValueError(f"consistency.geo.interval must be >= 1, got {self.interval}")


@dataclass(frozen=True)
class ConsistencyConfig:
    mode: str = field(default="auto", metadata={
        "help": "sync: pulls see every earlier push; async: all but the last `staleness` steps'; geo: rows train "
                "on the worker, changes pushed every `interval` steps; auto: async in one process (the next pull "
                "overlaps the step), sync with parameter servers or several workers (as fast there, and a better "
                "model)"})
    max_in_flight: int = field(default=MAX_IN_FLIGHT, metadata={
        "help": "sync, async: pushes not yet acknowledged, per worker, before a step waits"})
    sync: SyncConfig = field(default_factory=SyncConfig, metadata={"help": "read in sync mode only"})
    async_: AsyncConfig = field(default_factory=AsyncConfig, metadata={  # `async` is a keyword: the key says it
        "key": "async", "help": "read in async mode only"})
    geo: GeoConfig = field(default_factory=GeoConfig, metadata={"help": "read in geo mode only"})

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"consistency.mode must be 'auto', 'sync', 'async' or 'geo', got {self.mode!r}")
        if self.max_in_flight < 1:
            raise ValueError(f"consistency.max_in_flight must be >= 1, got {self.max_in_flight}")
        if self.mode == "geo" and self.max_in_flight != MAX_IN_FLIGHT:
            raise ValueError("consistency.max_in_flight bounds the pushes in flight in sync and async mode; a GEO "
                             "worker pushes its rows' changes every consistency.geo.interval steps: drop it, or set "
                             "another consistency.mode")
        for mode in ("sync", "async", "geo"):
            if mode != self.mode and not (self.mode == "auto" and mode != "geo"):
                self._unread(mode, f"consistency.mode is {self.mode!r}")

    def of(self, mode: str):
        """The sub-table of ``mode`` ("sync", "async" or "geo")."""
        return getattr(self, "async_" if mode == "async" else mode)

    def resolve(self, distributed: bool) -> str:
        """The mode this run trains in: "auto" is sync for servers or several workers, else async;
        a sub-table set for the mode "auto" did not resolve to is refused."""
        if self.mode != "auto":
            return self.mode
        mode = "sync" if distributed else "async"
        job = "parameter servers or several workers" if distributed else "one process on embedded shards"
        self._unread("async" if mode == "sync" else "sync", f'consistency.mode = "auto" is {mode!r} in this job '
                     f"({job})")
        return mode

    def _unread(self, mode: str, why: str) -> None:
        knobs, default = self.of(mode), type(self.of(mode))()
        changed = [f.name for f in fields(knobs) if getattr(knobs, f.name) != getattr(default, f.name)]
        if changed:
            raise ValueError(f"consistency.{mode}.{changed[0]} = {getattr(knobs, changed[0])!r} is read in {mode} mode "
                             f"only, and {why}: drop it, or set consistency.mode = {mode!r}")
