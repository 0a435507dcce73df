"""Checks of every request a store receives, before anything changes.

Each raises ``ValueError`` saying what is wrong and what to change; a rejected request
leaves the store exactly as it was (tests compare digests before and after).
"""

import numpy as np

MAX_STEP = 2**32 - 1


def quote(text: str, n: int = 64) -> str:
    """A user string for an error message: at most ``n`` characters of it."""
    return repr(text) if len(text) <= n else f"{text[:n]!r}... ({len(text)} characters)"


def check_table(name, tables: dict) -> None:
    if not isinstance(name, str):
        raise TypeError(f"table must be a str, got {type(name).__name__}")
    if name not in tables:
        raise ValueError(f"unknown table {quote(name)}; this store has {sorted(tables)}")


def check_ids(ids) -> None:
    if not isinstance(ids, np.ndarray) or ids.dtype != np.int64:
        raise ValueError(f"ids must be a numpy int64 array, got {_describe(ids)}")
    if ids.ndim != 1:
        raise ValueError(f"ids must be one-dimensional, got shape {ids.shape}")


def check_grads(grads, n: int, dim: int, table: str) -> None:
    if not isinstance(grads, np.ndarray) or grads.dtype != np.float32:
        raise ValueError(f"gradients must be a numpy float32 array, got {_describe(grads)}")
    if grads.shape != (n, dim):
        raise ValueError(f"gradients for table {table!r} must have shape (len(ids), dim) = ({n}, {dim}), "
                         f"got {grads.shape}")
    if not np.isfinite(grads).all():
        bad = int(np.flatnonzero(~np.isfinite(grads).all(axis=1))[0])
        raise ValueError(f"gradients for table {table!r} hold NaN or Inf (first at row {bad}); "
                         "lower the learning rate or clip gradients")


def check_bound(grads: np.ndarray, kind: str, bound: float, table: str) -> None:
    """Finite gradients past ``bound`` (``ps.limits.max_gradient``) would overflow the optimizers'
    float32 accumulators of squares within a few pushes and freeze their rows: refused.
    Pushes of other kinds carry values (deltas, copies of rows), not gradients."""
    if kind != "grad" or not grads.size or max(grads.max(), -grads.min()) <= bound:
        return
    bad = int(np.flatnonzero((np.abs(grads) > bound).any(axis=1))[0])
    raise ValueError(f"gradients for table {table!r} reach {float(np.abs(grads).max()):.4g} (first at row {bad}), "
                     f"past ps.limits.max_gradient = {bound:g}: lower the learning rate or clip gradients "
                     "(or raise ps.limits.max_gradient)")


def check_encodable(grads: np.ndarray, codec, table: str) -> None:
    """Finite gradients past the push codec's range would cross as inf and be refused by the
    shards they go to, after the others applied their parts: refuse the whole push first."""
    if codec.overflow is None or not grads.size or max(grads.max(), -grads.min()) < codec.overflow:
        return
    bad = int(np.flatnonzero((np.abs(grads) >= codec.overflow).any(axis=1))[0])
    raise ValueError(f"gradients for table {table!r} reach {float(np.abs(grads).max()):.4g} (first at row {bad}), "
                     f"past what the push codec {codec.name!r} (wire.push) carries (|x| < {codec.overflow:.4g}; "
                     "it would arrive as inf): use 'bf16' (float32's range) or 'fp32', or clip gradients")


def check_decoded(rows: np.ndarray, codec, table: str) -> None:
    """Stored rows are finite: an inf in pulled rows is a value past the pull codec's range,
    named here rather than met later as a NaN loss."""
    if codec.overflow is None or np.isfinite(rows).all():
        return
    bad = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
    raise ValueError(f"rows of table {table!r} hold values past what the pull codec {codec.name!r} (wire.pull) "
                     f"carries (|x| < {codec.overflow:.4g}; first at row {bad}): use 'bf16' (float32's range) or 'fp32'")


def check_counts(counts, n: int, kind: str = "grad") -> None:
    """``counts``: None (one update per row), or (n,) int32 >= 1, how many updates each
    gradient row accumulates (a worker cache's pending sum); only gradient pushes carry them."""
    if counts is None:
        return
    if kind != "grad":
        raise ValueError(f"counts: only gradient pushes carry counts, not kind={quote(str(kind))} (a delta is a "
                         "change to add, not updates to count); send counts=None")
    if not isinstance(counts, np.ndarray) or counts.dtype != np.int32:
        raise ValueError(f"counts must be None or a numpy int32 array, got {_describe(counts)}")
    if counts.shape != (n,):
        raise ValueError(f"counts must have shape (len(ids),) = ({n},), got {counts.shape}")
    if n and int(counts.min()) < 1:
        bad = int(np.flatnonzero(counts < 1)[0])
        raise ValueError(f"counts must be >= 1 (updates each gradient row holds), got {int(counts[bad])} at row {bad}")


PUSH_KINDS = ("grad", "delta", "replica")  # "replica": a refresh of copied hot rows (replicas.py)


def check_kind(kind) -> None:
    if kind not in PUSH_KINDS:
        shown = quote(kind) if isinstance(kind, str) else type(kind).__name__
        raise ValueError(f"kind: a push carries one of {PUSH_KINDS}, got {shown}")


def check_step(step) -> None:
    if not isinstance(step, (int, np.integer)) or isinstance(step, bool) or not 0 <= step <= MAX_STEP:
        shown = step if isinstance(step, (int, np.integer)) and abs(int(step)) < 10**20 else type(step).__name__
        raise ValueError(f"step must be an integer in [0, {MAX_STEP}], got {shown}")


def check_routing(ids: np.ndarray, shard: int, plan, table: str) -> None:
    """Every id of a request to stored table ``table`` is shard ``shard``'s by ``plan`` (``sharding/plan.py``)."""
    if plan.n_shards == 1 or len(ids) == 0:
        return
    wrong = np.flatnonzero(plan.route(table, ids) != shard)
    if len(wrong):
        raise ValueError(f"id {int(ids[wrong[0]])} of table {table!r} belongs to another shard than {shard} of "
                         f"{plan.n_shards} by the sharding plan; route ids with the client (sharding/plan.py)")


def _describe(x) -> str:
    if isinstance(x, np.ndarray):
        return f"{x.dtype} array"
    return type(x).__name__
