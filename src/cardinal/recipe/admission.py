"""``[ps.memory.admission]``: which new ids get a row. Plain dataclasses with no numpy or numba,
so that recipes load (and errors print) fast; the store builds its filters from them
(``embedding/admission``)."""

from dataclasses import asdict, dataclass, field, fields

from cardinal.recipe.numbers import check_int

ADMISSION_POLICIES = ("none", "count", "bloom", "probability")
KEY = "ps.memory.admission"


@dataclass(frozen=True)
class AdmissionConfig:
    policy: str = field(default="none", metadata={
        "help": 'which new ids get a row: "none" (every id at once), "count" (exact counts), "bloom" (a counting '
                'Bloom filter: bounded memory) or "probability" (Monolith\'s: each sighting admits with '
                "`probability`); an id not admitted reads zeros"})
    threshold: int = field(default=2, metadata={
        "help": "count, bloom: the sighting on which an id gets a row (bloom: at most 255)"})
    probability: float = field(default=0.25, metadata={
        "help": "probability: the chance that one sighting admits an id"})
    bloom_bytes: int = field(default=4 << 20, metadata={"help": "bloom: one-byte counters per table per shard"})
    seed: int = field(default=0, metadata={"help": "bloom, probability: of the hashes and coins"})
    tables: dict = field(default_factory=dict, metadata={
        "help": "per-table changes, {table = {key = value}}: e.g. 'ps.memory.admission.tables.emb.threshold=5'; a "
                "baseline table lr_X follows X"})

    def __post_init__(self):
        if self.policy not in ADMISSION_POLICIES:
            raise ValueError(f"{KEY}.policy must be one of {list(ADMISSION_POLICIES)}, got {self.policy!r}")
        check_int(self.threshold, f"{KEY}.threshold", 1, 255 if self.policy == "bloom" else 2**32 - 1)
        if not 0 < self.probability <= 1:
            raise ValueError(f"{KEY}.probability must be in (0, 1], got {self.probability!r}")
        check_int(self.bloom_bytes, f"{KEY}.bloom_bytes", 64, 2**40)
        check_int(self.seed, f"{KEY}.seed", 0, 2**63 - 1)
        if not isinstance(self.tables, dict):
            raise ValueError(f"{KEY}.tables must be a table of tables, got {self.tables!r}")
        for name in self.tables:
            self.for_table(name)

    def for_table(self, name: str) -> "AdmissionConfig":
        """The settings of table ``name``: these, with its entry of ``tables`` applied."""
        changes = self.tables.get(name, {})
        if not isinstance(changes, dict):
            raise ValueError(f"{KEY}.tables.{name} must be a table of settings, got {changes!r}")
        known = {f.name for f in fields(self)} - {"tables"}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown setting {KEY}.tables.{name}.{unknown[0]}; it takes {sorted(known)}")
        if not changes:
            return AdmissionConfig(**{**asdict(self), "tables": {}})
        return AdmissionConfig(**{**asdict(self), **changes, "tables": {}})
