"""``[plan]``: where each table's rows live (``cardinal/planner``), and the copies of hot rows
on every server."""

from dataclasses import dataclass, field

from cardinal.home import expand


@dataclass(frozen=True)
class PlanConfig:
    layout: str = field(default="hash", metadata={
        "help": '"hash", every table row-wise over every server; "auto", the planner\'s plan from a sample of the '
                "data (tables whole on one server where the load stays balanced: fewer requests a step); or a plan "
                "file from `cardinal plan RECIPE --out FILE`. A checkpoint loads into any plan (into another column "
                "split from fp32 rows only)"})
    replicate: dict = field(default_factory=dict, metadata={
        "help": 'with layout = "auto" (and `cardinal plan`): per table, e.g. {C5 = 2000}, its ids in the most '
                "batches of a sample copied to every server, read-only; worker w reads them from one server, the "
                "table's first + w, so several workers' reads of a table placed on fewer servers than all spread "
                "over them, while its gradients go to its own servers (ps/plan.py). A table the plan spreads over "
                "every server gets no copies: its reads are spread already"})
    replica_staleness: int = field(default=4, metadata={
        "help": "steps a copy may lag its row: one worker refreshes the copies that often; a copy older than this "
                "is not read (its row is, from its own server)"})

    def __post_init__(self):
        if not isinstance(self.layout, str) or not self.layout:
            raise ValueError(f"plan.layout must be 'hash', 'auto' or a plan file's path, got {self.layout!r}")
        if self.layout not in ("hash", "auto"):
            object.__setattr__(self, "layout", expand(self.layout))
        if not isinstance(self.replicate, dict) or not all(
                isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in self.replicate.values()):
            raise ValueError(f"plan.replicate must map tables to a number of hot ids >= 1, e.g. {{C5 = 2000}}, "
                             f"got {self.replicate!r}")
        if not isinstance(self.replica_staleness, int) or isinstance(self.replica_staleness, bool) or \
                self.replica_staleness < 1:
            raise ValueError(f"plan.replica_staleness must be an integer >= 1, got {self.replica_staleness!r}")
        if self.replicate and self.layout != "auto":
            raise ValueError(f"plan.replicate copies hot rows in the planner's plan: set plan.layout = \"auto\", or "
                             f"make a plan file with `cardinal plan RECIPE --set plan.replicate=... --out FILE` and "
                             f"train with plan.layout = FILE alone (plan.layout is {self.layout!r})")
