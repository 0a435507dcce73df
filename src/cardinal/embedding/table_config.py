"""A table's settings (``TableConfig``) and what follows from them alone: its row format and widths.

Besides the layout of its rows, a table's config holds what it does after a push (``after_push.py``):
``chunk_every``, the steps between passes over chunked rows (``chunks > 1``), and ``saec``, when
set, the step and ratio at which its rows are clustered (Saec, ``clustered_table.py``).
"""

from dataclasses import dataclass

import numpy as np

from cardinal.embedding import formats
from cardinal.optim import SparseOptimizer


@dataclass(frozen=True)
class SaecSpec:
    """When and how a table is clustered: ``ratio`` ids a cluster in each field (ceil(n / ratio)
    clusters, at least ``clustered_table.MIN_CLUSTERS``), after the first push of a step >= ``at``;
    an id's field is its bits from ``shift`` up (criteo 32, movielens 40)."""

    ratio: float
    at: int
    shift: int = 32

    def __post_init__(self):
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) or not self.ratio >= 1:
            raise ValueError(f"saec ratio must be a number >= 1 (ids a cluster), got {self.ratio!r}")
        if isinstance(self.at, bool) or not isinstance(self.at, int) or self.at < 1:
            raise ValueError(f"saec at must be an integer step >= 1, got {self.at!r}")
        if isinstance(self.shift, bool) or not isinstance(self.shift, int) or not 1 <= self.shift <= 63:
            raise ValueError(f"saec shift must be an integer in [1, 63], got {self.shift!r}")


@dataclass(frozen=True)
class TableConfig:
    name: str
    dim: int
    init_scale: float = 0.01  # new rows are uniform in [-init_scale, init_scale)
    seed: int = 0
    storage: str = "fp32"     # how values are stored (``formats/``): fp32, fp16, bf16, int8
    chunks: int = 1           # > 1: values (fp32) in this many chunks a row frees and revives (formats/chunked.py)
    chunk_target: float = 1.0  # ... keeping at most this share of the RAM rows' chunks live
    chunk_tail: int = 0       # ... after the chunks, this many columns never freed (a wide part's weight)
    first_column: int = 0     # a column piece of a wider row (``sharding/plan.py``): where its values start in it
    wide: int = 0             # the row's last columns are a wide part's weights: a row-wise optimizer's own (optim/base.py)
    chunk_every: int = 100    # steps between the passes over chunked rows that choose which chunks stay (chunks > 1)
    saec: SaecSpec | None = None  # clustered while training (Saec), as this says

    def __post_init__(self):
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"table name {self.name!r} must be letters, digits, '_' or '-'")
        if not isinstance(self.dim, int) or self.dim < 1:
            raise ValueError(f"table {self.name!r}: dim must be a positive integer, got {self.dim!r}")
        if not (np.isfinite(self.init_scale) and self.init_scale >= 0):
            raise ValueError(f"table {self.name!r}: init_scale must be finite and >= 0")
        if self.storage not in formats.FORMATS:
            raise ValueError(f"table {self.name!r}: storage must be one of {list(formats.FORMATS)}, "
                             f"got {self.storage!r}")
        if not isinstance(self.chunks, int) or self.chunks < 1:
            raise ValueError(f"table {self.name!r}: chunks must be an integer >= 1 (1: off), got {self.chunks!r}")
        if not isinstance(self.chunk_tail, int) or not 0 <= self.chunk_tail < self.dim:
            raise ValueError(f"table {self.name!r}: chunk_tail must be an integer in [0, dim), got {self.chunk_tail!r}")
        if isinstance(self.wide, bool) or not isinstance(self.wide, int) or not 0 <= self.wide < self.dim:
            raise ValueError(f"table {self.name!r}: wide must be an integer in [0, dim), got {self.wide!r}")
        if not isinstance(self.first_column, int) or self.first_column < 0:
            raise ValueError(f"table {self.name!r}: first_column must be an integer >= 0, got {self.first_column!r}")
        if not 0 < self.chunk_target <= 1:
            raise ValueError(f"table {self.name!r}: chunk_target must be in (0, 1], got {self.chunk_target!r}")
        if self.chunks > 1:
            if (self.dim - self.chunk_tail) % self.chunks:
                raise ValueError(f"table {self.name!r}: dim {self.dim} - chunk_tail {self.chunk_tail} must be "
                                 f"divisible by chunks {self.chunks}")
            if self.chunk_target * self.chunks < 1:
                raise ValueError(f"table {self.name!r}: chunk_target must be >= 1 / chunks = {1 / self.chunks:g} "
                                 f"(every row keeps its first chunk), got {self.chunk_target}")
            if self.storage != "fp32":
                raise ValueError(f"table {self.name!r}: chunks > 1 stores values as fp32 in its chunks; "
                                 f"storage must be 'fp32', got {self.storage!r}")
        if not isinstance(self.chunk_every, int) or isinstance(self.chunk_every, bool) or self.chunk_every < 1:
            raise ValueError(f"table {self.name!r}: chunk_every must be an integer >= 1, got {self.chunk_every!r}")
        if self.saec is not None:
            if not isinstance(self.saec, SaecSpec):
                raise TypeError(f"table {self.name!r}: saec must be a SaecSpec or None, got {type(self.saec).__name__}")
            if self.chunks != 1:
                raise ValueError(f"table {self.name!r}: saec with chunked rows (chunks > 1), which Saec cannot cluster")


def bind(config: TableConfig, optimizer: SparseOptimizer) -> SparseOptimizer:
    """The optimizer for this table's rows: their wide part's weights named (``optim/base.py``)."""
    return optimizer.with_wide(config.wide)


def make_format(config: TableConfig, optimizer: SparseOptimizer) -> formats.RowFormat:
    """The table's row format: a shared one by name, or its own chunk pool (``chunks > 1``)."""
    if config.chunks == 1:
        return formats.get(config.storage)
    return formats.Chunked(config.dim, config.chunks, config.chunk_tail, bind(config, optimizer).state_width,
                           config.chunk_target)


def stored_width(config: TableConfig, optimizer: SparseOptimizer) -> int:
    """float32 words a stored row takes: its encoded values, then the optimizer's state."""
    return make_format(config, optimizer).width(config.dim, bind(config, optimizer).state_width(config.dim))


def portable_width(config: TableConfig, optimizer: SparseOptimizer) -> int:
    """float32 words of a row in the cold tier and in checkpoints (``formats/base.py``)."""
    return make_format(config, optimizer).portable_width(config.dim, bind(config, optimizer).state_width(config.dim))
