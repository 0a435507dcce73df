"""What ``cardinal train --resume RUN`` may change, checked before anything in RUN is written.

The resumed recipe is RUN/recipe.json plus the overrides. Keys that fix the shapes of the saved
model, tables or optimizer state, or what the saved data position counts, cannot change (FROZEN);
every other key may: learning rates and other optimizer hyper-parameters, train.* (steps, epochs,
threads), eval.* and checkpoint.* (cadence), data files, the servers and shards (a checkpoint of
2 shards loads into 3), the plan, the wire's codecs (servers keep float32 whatever crosses),
consistency. ``train.steps`` and ``train.epochs`` are totals over the whole run: a run already at
them is refused (nothing would train) rather than rewritten as a no-op. A recipe.json written
before the recipe's sections moved is refused naming each old key's new place (``moved.py``).
"""

import json
from pathlib import Path

from cardinal.checkpoint.layout import latest
from cardinal.recipe import Recipe, from_dict, load_dict

# a key, or a whole section or sub-table, whose change the checkpoint cannot follow
FROZEN = ("model", "embedding.dim", "embedding.dims", "embedding.shared", "embedding.field_tables",
          "embedding.pooling", "embedding.init_scale",
          "embedding.seed", "compression.storage", "compression.table_storage",
          "compression.hash_buckets", "compression.fiited.chunks",
          "compression.saec.ratio", "compression.saec.at",  # clustered tables, or the step they will be
          "sparse_optimizer.name", "dense_optimizer.name", "data.format",
          "data.batch_size", "data.batch_scope",
          "data.holdout", "data.holdout_by", "train.seed",  # which rows are held out: trained rows would move
          "train.baseline")                                   # to the eval side; the baseline's own tables
UNSET = "(not set)"
RESUMABLE = ("learning rates and optimizer settings but their names, train.* (steps, epochs, threads), eval.* "
             "and checkpoint.* (cadence), data files, ps.* (servers, shards), plan.*, wire.* (codecs), consistency.*")


def saved_recipe(run_dir: Path) -> dict:
    if not (run_dir / "recipe.json").is_file():
        raise ValueError(f"{run_dir} is not a run directory (no recipe.json)")
    try:
        return json.loads((run_dir / "recipe.json").read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{run_dir / 'recipe.json'} is not valid JSON ({e}); restore it from a copy") from None


def resumed_recipe(run_dir: Path, overrides: list[str]) -> Recipe:
    """RUN's recipe with the overrides, refused when one changes a FROZEN key (named)."""
    raw = saved_recipe(run_dir)
    before = from_dict(raw)
    after = load_dict(raw, overrides)
    old, new = _flat(before.to_dict()), _flat(after.to_dict())
    for key in sorted(old.keys() | new.keys(), key=lambda k: (not k.endswith(".name"), k)):  # model.name first
        if old.get(key, UNSET) != new.get(key, UNSET) and any(key == f or key.startswith(f + ".") for f in FROZEN):
            raise ValueError(f"--resume cannot change {key} (the run has {old.get(key, UNSET)!r}, the override "
                             f"{new.get(key, UNSET)!r}): it fixes the shape of what {run_dir} saved; start a new "
                             f"run for it. A resume may change {RESUMABLE}")
    return after


def resumable(run_dir: Path, overrides: list[str]) -> Recipe:
    """The recipe a resume of RUN trains with, refused when it cannot go on (``check_not_done``)."""
    recipe = resumed_recipe(run_dir, overrides)
    check_not_done(run_dir, recipe)
    return recipe


def check_not_done(run_dir: Path, recipe: Recipe) -> None:
    """Refuse a resume that would do nothing: the newest checkpoint is already at the totals, and
    the run was summarised there (a signal at the last step leaves it to the resume to finish)."""
    from cardinal.checkpoint.reader import Reader  # numba: only on a resume

    found = latest(run_dir / "checkpoints")
    if found is None:
        raise ValueError(f"no committed checkpoint in {run_dir / 'checkpoints'}: nothing to resume")
    extra = Reader(found).extra
    step, epoch, t = extra["step"], extra["epoch"], recipe.train
    if ((t.steps and step >= t.steps) or epoch >= t.epochs) and _finished(run_dir, step):
        raise ValueError(f"run {run_dir} is at step {step} (epoch {epoch}) already; raise train.steps / "
                         f"train.epochs to go on (both count from the run's start: train.steps = {t.steps}, "
                         f"train.epochs = {t.epochs})")
    best, ev = extra.get("best") or {}, recipe.eval
    metric = "logloss" if ev.early_stop == "logloss" else "auc"
    if ev.early_stop != "none" and best.get("metric") == metric and best.get("step") is not None \
            and best.get("since", 0) >= ev.patience and _finished(run_dir, step):
        raise ValueError(f"run {run_dir} stopped early at step {step}: eval {metric} did not improve for "
                         f"{best['since']} evaluations after step {best['step']} (eval.patience = {ev.patience}); "
                         f"raise eval.patience, or set eval.early_stop = \"none\", to go on")


def _finished(run_dir: Path, step: int) -> bool:
    """The run ended at ``step`` with its summary written. A run stopped by a signal at its last step
    saved that step but was never evaluated or summarised: its resume does that, training nothing."""
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("steps") == step
    except (OSError, ValueError, AttributeError):
        return False


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
