"""Admission: a new id gets a row only once it has proven it will be seen again.

Most ids of a CTR data set are seen once or twice (the long tail of a Zipf law); a row for
each of them costs memory and learns nothing. A filter sits in front of row creation: when a
training pull meets ids that have no row, ``decide`` says which of them may have one now.
An id not admitted reads zeros, has no optimizer state, and its gradients are dropped; its
sightings are counted by the filter (each pull of it counts one).

``decide`` changes nothing: it returns the verdict and a ``commit`` to call once the request
has succeeded as a whole, so a refused request (a store limit, say) leaves the counters as
they were. Under a memory budget a filter's state is bounded too: its counts age out (``decay``).
A filter's state goes into checkpoints (``state``/``load``) and reshards with
the rows: a filter of shard s of N keeps what concerns the ids routing to s.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import numpy as np

from cardinal.recipe.admission import AdmissionConfig


def check_part(part: dict, dtypes: dict[str, type]) -> None:
    """A saved state holds exactly these 1-d arrays, of these dtypes and of one length."""
    if set(part) != set(dtypes):
        raise ValueError(f"holds {sorted(part)}, expected {sorted(dtypes)}")
    for key, dtype in dtypes.items():
        if part[key].dtype != np.dtype(dtype) or part[key].ndim != 1:
            raise ValueError(f"{key} is {part[key].dtype} {part[key].shape}, expected 1-d {np.dtype(dtype)}")
    if len({len(a) for a in part.values()}) > 1:
        raise ValueError(f"arrays of different lengths: {[len(a) for a in part.values()]}")


class Decision(NamedTuple):
    admitted: np.ndarray       # (n,) bool, for the ids given to ``decide``
    commit: Callable[[], None]  # count the sightings of the ids not admitted




class AdmissionFilter(ABC):
    name: ClassVar[str]
    settings: ClassVar[tuple[str, ...]]  # the AdmissionConfig fields this policy reads

    def __init__(self, config: AdmissionConfig):
        assert config.policy == self.name
        self.config = config

    @abstractmethod
    def decide(self, ids: np.ndarray, step: int) -> Decision:
        """Which of ``ids`` (n,) int64, unique and without rows, are admitted at this sighting."""

    def state(self) -> dict[str, np.ndarray]:
        """Arrays to checkpoint (none for a stateless filter)."""
        return {}

    def load(self, parts: list[dict[str, np.ndarray]], mine: Callable[[np.ndarray], np.ndarray]) -> None:
        """Replace the state by the saved ``parts`` (every saved shard's, or this shard's own when the
        layout is unchanged); ``mine(ids)`` is the mask of ids that route to this shard."""

    @property
    def nbytes(self) -> int:
        return 0

    @property
    def decayable_bytes(self) -> int:
        """Bytes ``decay`` may give back to a memory budget, a round at a time (0: fixed state)."""
        return 0

    def decay(self) -> None:
        """Halve every count: ids seen once are forgotten (a filter's way to age out old sightings)."""

    def describe(self) -> dict:
        """Policy and settings, as recorded in checkpoint manifests."""
        return {"policy": self.name, **{k: getattr(self.config, k) for k in self.settings}}

    def check(self) -> None:
        """Invariants of the state; raises AssertionError naming the broken one."""
