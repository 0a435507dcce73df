"""``[compression]``: how servers store rows and how many rows there are: the row format, the
hashing trick, FIITED's chunks (``[compression.fiited]``) and Saec's clusters
(``[compression.saec]``). What a compression needs of the tables' shape (one dim for every
table, a dim the chunks divide) is checked by ``Recipe``, which sees ``[embedding]`` too."""

import math
from dataclasses import dataclass, field

STORAGE = ("fp32", "fp16", "bf16", "int8")  # the row formats of embedding/formats (not imported here: numba)


@dataclass(frozen=True)
class FiitedConfig:
    chunks: int = field(default=1, metadata={
        "help": "FIITED (embedding/formats/chunked.py): > 1 splits each row's dim values into this many chunks; a "
                "row keeps the prefix of chunks its gradients show useful, freed chunks read zeros (a wide part's "
                "weight is never freed); 1: off"})
    target: float = field(default=1.0, metadata={
        "help": "the share of chunks kept live on each server, in [1/chunks, 1] (each row keeps one)"})
    every: int = field(default=100, metadata={
        "help": "steps between the passes that choose which chunks stay (and free the others' memory)"})

    def __post_init__(self):
        if not isinstance(self.chunks, int) or isinstance(self.chunks, bool) or self.chunks < 1:
            raise ValueError(f"compression.fiited.chunks must be an integer >= 1, got {self.chunks!r}")
        if self.chunks == 1 and self.target != 1:
            raise ValueError(f"compression.fiited.target = {self.target} applies only with "
                             "compression.fiited.chunks > 1")
        if not 1 / self.chunks <= self.target <= 1:
            raise ValueError(f"compression.fiited.target must be in [1 / chunks, 1] = [{1 / self.chunks:g}, 1] (every "
                             f"row keeps its first chunk), got {self.target!r}")
        if not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"compression.fiited.every must be an integer >= 1, got {self.every!r}")


@dataclass(frozen=True)
class SaecConfig:
    ratio: float = field(default=0.0, metadata={
        "help": "Saec as the training table (embedding/clustered_table.py): after the push of step `at` each "
                "server clusters its rows of the model's tables field by field, about this many ids a cluster "
                "(ceil(n / ratio), at least 16 a field), and from then on an id reads and trains its cluster's "
                "vector (the map frozen; an id first seen later joins its field's default cluster). 0: off; "
                "else >= 1. Tables lr_X stay whole"})
    at: int = field(default=0, metadata={
        "help": "the step after whose push the servers cluster (>= 1 with ratio; 0 without); that push waits for "
                "the clustering (1.39M rows, 4 shards: 35 s on 2 cores, one after another), so ps.timeout_s must "
                "exceed it"})

    def __post_init__(self):
        if not (self.ratio == 0 or 1 <= self.ratio < math.inf):
            raise ValueError(f"compression.saec.ratio must be 0 (off) or a number >= 1 (ids a cluster), "
                             f"got {self.ratio!r}")
        if self.ratio and self.at < 1:
            raise ValueError(f"compression.saec.ratio = {self.ratio} needs compression.saec.at >= 1 (the step after "
                             f"which the servers cluster), got {self.at}")
        if not self.ratio and self.at:
            raise ValueError(f"compression.saec.at = {self.at} applies only with compression.saec.ratio >= 1")


@dataclass(frozen=True)
class CompressionConfig:
    storage: str = field(default="fp32", metadata={
        "help": "how servers store values (embedding/formats): fp32, fp16, bf16, int8 (a per-row scale); optimizer "
                "state stays float32; pulls read float32 either way"})
    table_storage: dict = field(default_factory=dict, metadata={
        "help": 'per table, e.g. {emb = "int8"}; baseline tables lr_X: fp32'})
    hash_buckets: int = field(default=0, metadata={
        "help": "the hashing trick (a baseline for the formats): ids fold into this many rows per table, colliding "
                "ids share one; 0: every id its own row"})
    fiited: FiitedConfig = field(default_factory=FiitedConfig, metadata={"help": "rows kept in chunks, freed by use"})
    saec: SaecConfig = field(default_factory=SaecConfig, metadata={"help": "tables trained as clusters of ids"})

    def __post_init__(self):
        if self.hash_buckets < 0:
            raise ValueError(f"compression.hash_buckets must be >= 0 (0: off), got {self.hash_buckets}")
        for where, name in [("compression.storage", self.storage), *(
                (f"compression.table_storage.{t}", n) for t, n in self.table_storage.items())]:
            if name not in STORAGE:
                raise ValueError(f"{where} must be one of {list(STORAGE)}, got {name!r}")
        chunked, clustered = self.fiited.chunks > 1, bool(self.saec.ratio)
        if chunked and self.storage != "fp32":
            raise ValueError(f"compression.fiited.chunks > 1 stores values as fp32 in its chunks; set "
                             f"compression.storage = 'fp32' (got {self.storage!r}) or compression.fiited.chunks = 1")
        if clustered and chunked:
            raise ValueError("compression.saec.ratio with compression.fiited.chunks > 1: Saec clusters whole rows; "
                             "set compression.fiited.chunks = 1 or compression.saec.ratio = 0")
        if clustered and self.hash_buckets:
            raise ValueError("compression.saec.ratio with compression.hash_buckets: hashed ids have lost their field "
                             "and share rows already; set one of them to 0")
