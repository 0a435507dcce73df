"""The keys that moved when the recipe's sections were cut by concern (issue 26): for one
release, a recipe file, a ``--set`` or a run's saved recipe.json that uses an old key is
refused, naming each old key's new place (the values mean what they meant: only the names
moved). Nothing is translated silently: a run's recipe.json stays what it trained with."""

# old key -> its new place(s); a key that several modes read has one place in each mode's sub-table
MOVED = {
    "embedding.consistency": ("consistency.mode",),
    "embedding.staleness": ("consistency.async.staleness",),
    "embedding.geo_interval": ("consistency.geo.interval",),
    "embedding.max_in_flight": ("consistency.max_in_flight",),
    "embedding.combine": ("consistency.sync.combine", "consistency.async.combine"),
    "embedding.compensation": ("consistency.async.compensation",),
    "embedding.storage": ("compression.storage",),
    "embedding.table_storage": ("compression.table_storage",),
    "embedding.hash_buckets": ("compression.hash_buckets",),
    "embedding.chunks": ("compression.fiited.chunks",),
    "embedding.chunk_target": ("compression.fiited.target",),
    "embedding.chunk_every": ("compression.fiited.every",),
    "embedding.saec_ratio": ("compression.saec.ratio",),
    "embedding.saec_at": ("compression.saec.at",),
    "ps.max_message_mb": ("ps.limits.max_message_mb",),
    "ps.max_concurrent_calls": ("ps.limits.max_concurrent_calls",),
    "ps.max_rows": ("ps.limits.max_rows",),
    "ps.max_new_rows_per_request": ("ps.limits.max_new_rows_per_request",),
    "ps.request_window": ("ps.limits.request_window",),
    "ps.max_clients": ("ps.limits.max_clients",),
    "ps.client_idle_s": ("ps.limits.client_idle_s",),
    "ps.max_step_ahead": ("ps.limits.max_step_ahead",),
    "ps.max_gradient": ("ps.limits.max_gradient",),
    "ps.memory_budget": ("ps.memory.budget",),
    "ps.disk_budget": ("ps.memory.disk_budget",),
    "ps.disk_dir": ("ps.memory.disk_dir",),
    "ps.plan": ("plan.layout",),
    "ps.replicate": ("plan.replicate",),
    "ps.replica_staleness": ("plan.replica_staleness",),
    "train.eval_every": ("eval.every",),
    "train.early_stop": ("eval.early_stop",),
    "train.patience": ("eval.patience",),
    "train.min_delta": ("eval.min_delta",),
    "train.keep_best": ("eval.keep_best",),
    "train.checkpoint_every": ("checkpoint.every",),
    "train.checkpoint_minutes": ("checkpoint.minutes",),
    "train.keep_checkpoints": ("checkpoint.keep",),
    "train.full_every": ("checkpoint.full_every",),
    "train.log_every": ("metrics.log_every",),
    "train.tensorboard": ("metrics.tensorboard",),
    "train.metrics_port": ("metrics.port",),
    "train.metrics_host": ("metrics.host",),
}
# old section -> its new place: each of its keys moved under it, unchanged
MOVED_SECTIONS = {"admission": "ps.memory.admission", "eviction": "ps.memory.eviction"}


def moved_keys(raw: dict) -> list[str]:
    """One line per old key in ``raw`` (a parsed recipe): "OLD moved to NEW"."""
    lines = []
    for old, new in MOVED.items():
        section, name = old.split(".")
        if isinstance(raw.get(section), dict) and name in raw[section]:
            lines.append(f"{old} moved to {' or '.join(new)}")
    for old, new in MOVED_SECTIONS.items():
        if old in raw:
            keys = sorted(raw[old]) if isinstance(raw[old], dict) and raw[old] else []
            lines += [f"{old}.{k} moved to {new}.{k}" for k in keys] or [f"[{old}] moved to [{new}]"]
    return lines


def refuse_moved(raw: dict) -> None:
    """A ValueError naming every old key of ``raw`` and its new place, if it has any."""
    lines = moved_keys(raw)
    if lines:
        raise ValueError("this recipe uses keys that moved (the same values, new places; cardinal recipe show "
                         "prints every key): " + "; ".join(lines))
