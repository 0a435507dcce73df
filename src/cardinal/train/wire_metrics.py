"""Bytes per training sample each way, for metrics.jsonl and summary.json.

    pull_bytes_per_sample   embedding rows pulled for training, at the pull codec's size
    push_bytes_per_sample   gradient rows pushed, at the push codec's size
    wire_bytes_in/out_per_sample   whole gRPC messages (ids, headers, evaluation too); gRPC only
    copied_ids_per_sample, copied_stale_ids_per_sample   ids read from copies of hot rows, and
                            those whose copies were past their bound; only with a plan that
                            copies hot rows (``sharding/plan.py``)

Summed over all workers and divided by all workers' samples: a collective, so every worker
calls it at the same point (the trainer's log lines and its summary).
"""

NAMES = {"pull_row_bytes": "pull_bytes_per_sample", "push_row_bytes": "push_bytes_per_sample",
         "message_bytes_received": "wire_bytes_in_per_sample", "message_bytes_sent": "wire_bytes_out_per_sample",
         "copied_ids": "copied_ids_per_sample", "copied_stale_ids": "copied_stale_ids_per_sample"}


def per_sample(client, workers, samples: float, *, summed: bool = False) -> dict[str, float]:
    """``samples``: this worker's, summed here; with ``summed``, all workers' already (the
    trainer's summary gets the total), which must not be summed a second time."""
    m = client.metrics()
    keys = [k for k in NAMES if k in m]
    total, *counts = workers.sum(0.0 if summed else float(samples), *(float(m[k]) for k in keys))
    total = samples if summed else total
    return {NAMES[k]: (c / total if total else 0.0) for k, c in zip(keys, counts)}
