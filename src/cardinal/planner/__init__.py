"""Sharding plans for a run: the hash plan, one read from a file, or one the planner proposes.

    plan.layout = "hash"          every table row-wise over every server (the default)
    plan.layout = "auto"          the planner's (``propose.py``), from a sample of the data (``stats.py``)
    plan.layout = "plan.json"     a plan written by ``cardinal plan RECIPE --out plan.json`` (or by hand)

Every process of a job must use the same plan: ``cardinal launch`` resolves "auto" once and
hands its servers and workers the file; a worker checks each server holds what the plan puts
there (``PSClient.check_plan``). A checkpoint loads into any plan, so a resumed run may change it.

The planner reads a run's component configs (``inputs.py``: its [ps] section, its tables, its
data), not its recipe: ``cardinal.train.tables.plan_inputs(recipe)`` makes them.
"""

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

from cardinal import strict_json
from cardinal.planner.hot import hot_ids
from cardinal.planner.inputs import PlanInputs
from cardinal.planner.propose import propose
from cardinal.planner.stats import from_sample
from cardinal.sharding.plan import Replicas, ShardingPlan

log = logging.getLogger(__name__)


def resolve(inputs: PlanInputs, n_shards: int, sample_rows: int = 200_000, budget: int | None = None) -> ShardingPlan:
    """The plan ``plan.layout`` names, for ``n_shards`` servers of ``budget`` bytes each (None:
    ``ps.memory.budget``; embedded shards split it). Tables past the servers' budgets together are
    not an error in a run (the rows past it are evicted, or go to disk): "auto" is then the hash
    plan, which spreads them evenly."""
    choice = inputs.plan.layout
    if choice == "hash":
        return ShardingPlan(n_shards)
    if choice == "auto":
        stats = from_sample(inputs, sample_rows)
        budget = inputs.budget if budget is None else budget
        need = sum(t.bytes for t in stats)
        if budget and need > budget * n_shards:
            log.warning("plan.layout = \"auto\": the tables need about %.1f MB, %d servers of ps.memory.budget hold "
                        "%.1f MB: rows past it are evicted (or go to disk); the hash plan spreads them evenly",
                        need / 1e6, n_shards, budget * n_shards / 1e6)
            if inputs.plan.replicate:
                log.warning("plan.layout = \"auto\": no copies of hot rows (plan.replicate) in the hash plan")
            return ShardingPlan(n_shards)
        plan, copied = replicate(inputs, propose(stats, n_shards, budget, pinned=pinned(inputs)))
        for line in copied:
            log.info("plan.layout = \"auto\": %s", line)
        return plan
    plan = read(choice)
    if plan.n_shards != n_shards:
        raise ValueError(f"plan.layout {choice} is a plan for {plan.n_shards} servers, this job has {n_shards}: "
                         f"make one with cardinal plan RECIPE --set ps.shards={n_shards} --out FILE")
    return plan


def replicate(inputs: PlanInputs, plan: ShardingPlan) -> tuple[ShardingPlan, list[str]]:
    """``plan`` with the hot ids of each table of ``plan.replicate`` copied to every server
    (``hot.py``), and a line a table saying what its copies cover, or why it has none."""
    want = inputs.plan.replicate
    if not want:
        return plan, []
    spread = [t for t in want if t in tables_of(inputs) and len(plan.pieces(t)[0].servers) == plan.n_shards]
    rest = {t: k for t, k in want.items() if t not in spread}
    found = hot_ids(inputs, rest) if rest else {}
    staleness = inputs.plan.replica_staleness
    plan = replace(plan, replicas={**plan.replicas, **{t: Replicas(tuple(ids), staleness)
                                                       for t, (ids, _) in found.items()}})
    lines = [f"copies on every server: {t}'s {len(ids)} hottest ids, {share:.0%} of its pulled ids, "
             f"refreshed every {staleness} steps" for t, (ids, share) in found.items()]
    return plan, lines + [f"no copies of {t}: the plan spreads it over every server, which spreads its reads already"
                          for t in spread]


def tables_of(inputs: PlanInputs) -> set[str]:
    return {t.name for t in inputs.store.tables}


PLAN_SETTINGS = {"plan.layout", "plan.replicate", "plan.replica_staleness"}  # what a plan file holds once made


def without_plan_settings(sets: list[str]) -> list[str]:
    """``--set`` values but those a plan file made from them now holds."""
    return [s for s in sets if s.partition("=")[0].strip() not in PLAN_SETTINGS]


def pinned(inputs: PlanInputs) -> set[str]:
    """Tables a plan must leave row-wise over every server: those clustered while training (Saec)."""
    return set(inputs.store.saec)


def read(path: str | Path) -> ShardingPlan:
    try:
        obj = strict_json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"plan.layout: cannot read {path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"plan.layout: {path} is not JSON: {e}") from None
    except ValueError as e:  # a key (a table) named twice, nested too deep
        raise ValueError(f"plan.layout {path}: {e}") from None
    return ShardingPlan.from_json(obj, f"plan.layout {path}")


def write(plan: ShardingPlan, path: str | Path) -> None:
    """Atomically (a temporary file renamed over it): processes may be reading it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(plan.to_json(), indent=1) + "\n")
    os.replace(tmp, path)
