"""The interface every sparse optimizer implements.

An optimizer owns the math of one update and the layout of its per-row state; the table
owns where rows live. Its state sits in the same float32 row as the values, after them:

    data[r] = [ w_0 ... w_{dim-1} | s_0 ... s_{width-1} ]

``apply`` receives the rows pushed, already de-duplicated, with duplicate gradients summed
in a fixed order, so the same pushes in the same order give bitwise-identical tables.
Rows that are not pushed are not touched (no decay, no step count).

``counts`` (u,) int32 >= 1, when given, says how many updates (training steps) each gradient
row accumulates: a worker cache of hot rows pushes the sum ``g`` of a row's ``k`` pending
gradients once. Each optimizer documents its counted update in its module: where no exact
form exists it treats ``g`` as ``k`` updates with the mean gradient ``g / k``. ``counts=None``
runs the uncounted kernel, bitwise as before; counts of all ones give the same bits.

``wide``: a row whose last ``wide`` columns are a wide part's first-order weights (DeepFM,
Wide&Deep pack them after the embedding values, so one pull serves both). An element-wise
optimizer's state is per column already; a row-wise one (``rowwise_adagrad.py``) gives each of
them an accumulator of its own, as if it were a row of dim 1 in a table of its own (TorchRec
keeps first-order weights in such a table). A table binds its optimizer with ``with_wide``.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import ClassVar

import numpy as np


@dataclass(frozen=True)
class OptimizerConfig:
    """Base of each optimizer's own hyper-parameters (one dataclass per optimizer)."""

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not np.isfinite(value):
                raise ValueError(f"optimizer.{f.name} must be a finite number, got {value!r}")
            if value < 0:
                raise ValueError(f"optimizer.{f.name} must be >= 0, got {value}")


class SparseOptimizer(ABC):
    name: ClassVar[str]
    Config: ClassVar[type[OptimizerConfig]]
    wide: int = 0  # the row's last columns that keep state of their own (row-wise optimizers)

    def __init__(self, config: OptimizerConfig | None = None):
        self.config = config if config is not None else self.Config()
        if not isinstance(self.config, self.Config):
            raise TypeError(f"{self.name} takes {self.Config.__name__}, got {type(self.config).__name__}")

    @abstractmethod
    def state_width(self, dim: int) -> int:
        """float32 words of state per row."""

    def with_wide(self, wide: int) -> "SparseOptimizer":
        """This optimizer for rows whose last ``wide`` columns are first-order weights: itself, where
        every column's state is its own already."""
        return self

    def init_state(self, data: np.ndarray, start: int, stop: int, dim: int) -> None:
        """Initialise the state of new rows [start, stop); storage is zero-filled already."""

    @abstractmethod
    def kernel(self, dim: int, counted: bool = False) -> tuple:
        """(kernel, hyper): the compiled update and its trailing arguments, as ``apply`` calls them:
        ``kernel(data, rows, grads, dim, *hyper)``, counted ``kernel(data, rows, grads, counts, dim,
        *hyper)``. A kernel updates each row on its own, so it can run on any rows laid out as
        ``[values | state]``: a chunked table's tile of rows (``embedding/formats/chunk_kernels.py``)."""

    def apply(self, data: np.ndarray, rows: np.ndarray, grads: np.ndarray, dim: int,
              counts: np.ndarray | None = None) -> None:
        """One update of ``data[rows]`` (with ``counts``: each row's ``counts[i]`` updates, summed).

        data,    # (R, dim + width) float32
        rows,    # (u,) int64, unique
        grads,   # (u, dim) float32, finite
        counts,  # (u,) int32 >= 1, or None (one update each)
        """
        self.update(dim, counts)(data, rows, grads, slice(None))

    def update(self, dim: int, counts: np.ndarray | None = None) -> "Update":
        """This optimizer's update of rows of ``dim`` values, for a push whose unique ids have ``counts``."""
        return Update(*self.kernel(dim, counts is not None), dim, counts)

    def match_values(self, data: np.ndarray, dim: int) -> None:
        """Make the state of every row of ``data`` agree with the row's values, so that the next
        update steps from them: for copies of rows fetched without their state, given a fresh one
        (a worker cache's rows follow the worker's gradients, ``worker/sources/cache_slots.py``).
        Nothing to do where an update adds a step to the values; FTRL computes them from its state."""

    def scaled(self, factor: float) -> "SparseOptimizer":
        """The same optimizer with its learning rate times ``factor`` (staleness compensation)."""
        return type(self)(replace(self.config, lr=self.config.lr * factor)).with_wide(self.wide)

    def describe(self) -> dict:
        """Name and hyper-parameters, as recorded in checkpoint manifests."""
        return {"name": self.name, **asdict(self.config)}

    def f32(self, *names: str) -> tuple:
        """Hyper-parameters as float32 scalars, so kernels compute in float32 throughout."""
        return tuple(np.float32(getattr(self.config, n)) for n in names)


@dataclass(frozen=True)
class Update:
    """A push's update of rows, as a compiled kernel and its arguments rather than a closure: a row
    format that keeps rows in a layout of its own runs the same kernel on them a tile at a time, in
    place, instead of decoding every row into a copy and back (``embedding/formats/chunk_kernels.py``).

        kernel(data, rows, grads, dim, *hyper)              counts None
        kernel(data, rows, grads, counts, dim, *hyper)      counts: per unique id of the push

    (an optimizer's ``kernel``, or ``embedding/row_kernels.add_values`` for a GEO delta)."""
    kernel: Callable
    hyper: tuple
    dim: int
    counts: np.ndarray | None = None  # (u,) int32, the push's unique ids' (``apply``'s counts)

    def counts_at(self, at) -> np.ndarray | None:
        """The counts of the push's unique ids at positions ``at`` (a slice or indices)."""
        return None if self.counts is None else np.ascontiguousarray(self.counts[at])

    def __call__(self, data: np.ndarray, rows: np.ndarray, grads: np.ndarray, at) -> None:
        """Update rows ``rows`` of ``data`` (R, dim + state) with ``grads`` (n, dim): the push's unique
        ids at positions ``at``."""
        counts = self.counts_at(at)
        if counts is None:
            self.kernel(data, rows, grads, self.dim, *self.hyper)
        else:
            self.kernel(data, rows, grads, counts, self.dim, *self.hyper)
