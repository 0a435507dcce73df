"""What the planner reads of a run: component configs, not a recipe.

The planner imports nothing of ``cardinal.train`` (which imports the planner): whoever holds a
recipe derives these from it (``cardinal.train.tables.plan_inputs``) and hands them over.
"""

from collections.abc import Callable
from dataclasses import dataclass

from cardinal.ps import StoreConfig
from cardinal.recipe.plan import PlanConfig


@dataclass(frozen=True)
class PlanInputs:
    plan: PlanConfig               # the recipe's [plan]: layout, replicate, replica_staleness
    budget: int                    # ps.memory.budget in bytes: what one server's tables may take (0: none)
    store: StoreConfig             # the tables a server holds: widths, row formats, optimizer, clustered ones
    fields: dict[str, list[str]]   # table -> the sparse fields whose ids it holds (a baseline twin lr_X: X's)
    hash_buckets: int              # compression.hash_buckets: ids are folded to this many (0: not folded)
    batch_size: int                # data.batch_size: rows a global batch
    readers: Callable[..., tuple]  # readers(progress=True) -> (train reader, eval reader, info): the run's data
