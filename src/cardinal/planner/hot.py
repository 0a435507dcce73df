"""Which of a table's ids to copy to every server (``sharding/plan.py``, ``Replicas``): the ids in
the most batches of a sample of the training data. A batch pulls an id once however many of
its examples hold it, so an id's load on its server is the batches it is in, not its count.
"""

import numpy as np

from cardinal.planner.inputs import PlanInputs
from cardinal.planner.stats import _batch_ids, _table_ids


def hot_ids(inputs: PlanInputs, want: dict[str, int], rows: int = 200_000) -> dict[str, tuple[np.ndarray, float]]:
    """table -> (its ``want[table]`` ids in the most batches of the first ``rows`` training rows,
    sorted; the share of the table's pulled ids, batch by batch, that they are)."""
    known = _table_ids(inputs)
    for table, k in want.items():
        if table not in known:
            raise ValueError(f"plan.replicate: no table {table!r}; the recipe's tables are {sorted(known)}")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"plan.replicate: {table}={k!r}: give the number of hot ids to copy, an integer >= 1")
    train, _, _ = inputs.readers()
    seen: dict[str, list[np.ndarray]] = {t: [] for t in want}
    read = 0
    try:
        for batch in train:
            for table, ids in _batch_ids(inputs, batch).items():
                if table in want:
                    seen[table].append(np.unique(ids))
            read += len(batch.labels)
            if read >= rows:
                break
    finally:
        if hasattr(train, "close"):
            train.close()
    out = {}
    for table, k in want.items():
        pulled = np.concatenate(seen[table]) if seen[table] else np.empty(0, np.int64)
        ids, batches = np.unique(pulled, return_counts=True)
        top = np.argsort(-batches, kind="stable")[:k]
        out[table] = (np.sort(ids[top]), float(batches[top].sum() / max(len(pulled), 1)))
    return out
