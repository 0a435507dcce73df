"""What the planner reads of a run: component configs, not a recipe.

The planner imports nothing of ``cardinal.train`` (which imports the planner): whoever holds a
recipe derives these from it (``cardinal.train.tables.plan_inputs``) and hands them over.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cardinal.ps import StoreConfig


@dataclass(frozen=True)
class PlanInputs:
    ps: Any                        # the recipe's [ps] (train/config.py, PSConfig): plan, replicate,
                                   # replica_staleness, budget()
    store: StoreConfig             # the tables a server holds: widths, row formats, optimizer, clustered ones
    fields: dict[str, list[str]]   # table -> the sparse fields whose ids it holds (a baseline twin lr_X: X's)
    hash_buckets: int              # embedding.hash_buckets: ids are folded to this many (0: not folded)
    batch_size: int                # data.batch_size: rows a global batch
    readers: Callable[..., tuple]  # readers(progress=True) -> (train reader, eval reader, info): the run's data
