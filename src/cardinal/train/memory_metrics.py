"""The servers' memory, summed over shards, for metrics.jsonl and summary.json.

    ps_rows, ps_bytes           rows (all tiers) and bytes in RAM of every table on every server
    ps_bytes_max_shard          the fullest server's bytes in RAM (what ps.memory.budget bounds)
    ps_disk_rows, ps_disk_bytes rows and bytes in the disk tiers (ps.memory.disk_budget)
    ps_disk_write_amp           bytes the disk tiers wrote to their files (flushes, compactions) over the bytes
                                of rows put in them, so far (RocksDB's counters); absent before any
    ps_<table>_rows, _bytes     per table: rows (all tiers), bytes in RAM (rows in their format, hash index, ...
    ps_<table>_refused          ... sightings of new ids the admission filter held back (pulls)
    ps_<table>_dropped          ... gradient rows of ids without a row, dropped (pushes)
    ps_<table>_evicted_<why>    ... rows deleted, by reason: budget, disk_budget, ttl_steps, ttl_seconds
    ps_<table>_faulted, _demoted  ... rows read back from the disk tier, and written out to it
    ps_<table>_ram_hit_rate     ... the share of the ids training asked for that were in RAM (with a disk tier)
    ps_<table>_live_chunks      ... the value chunks its RAM rows hold (compression.fiited.chunks > 1)
    ps_<table>_clusters         ... its cluster rows, once clustered (compression.saec.ratio; rows: its ids)
"""

from cardinal.ps import PSClient


def server_metrics(client: PSClient) -> dict:
    shards = client.stats()
    out = {"ps_rows": 0, "ps_bytes": 0, "ps_bytes_max_shard": max(s["bytes"] for s in shards), "ps_disk_rows": 0,
           "ps_disk_bytes": sum(s["disk_bytes"] for s in shards)}
    put, written = (sum(t["disk_io"][k] for s in shards for t in s["tables"].values()) for k in (0, 1))
    if put:
        out["ps_disk_write_amp"] = written / put
    for s in shards:
        for name, t in s["tables"].items():
            out["ps_rows"] += t["rows"]
            out["ps_bytes"] += t["bytes"]
            out["ps_disk_rows"] += t["disk_rows"]
            for key in ("rows", "bytes", "refused", "dropped", "faulted", "demoted"):
                out[f"ps_{name}_{key}"] = out.get(f"ps_{name}_{key}", 0) + t[key]
            out[f"ps_{name}_requested"] = out.get(f"ps_{name}_requested", 0) + t["requested"]
            if "live_chunks" in t:  # chunked rows: the chunks held in RAM
                out[f"ps_{name}_live_chunks"] = out.get(f"ps_{name}_live_chunks", 0) + t["live_chunks"]
            if "clusters" in t:  # Saec: the cluster rows (vectors) of the shards clustered so far
                out[f"ps_{name}_clusters"] = out.get(f"ps_{name}_clusters", 0) + t["clusters"]
            for why, n in t["evicted"].items():
                out[f"ps_{name}_evicted_{why}"] = out.get(f"ps_{name}_evicted_{why}", 0) + n
    for name in shards[0]["tables"]:
        requested = out.pop(f"ps_{name}_requested")
        if requested:
            out[f"ps_{name}_ram_hit_rate"] = 1 - out[f"ps_{name}_faulted"] / requested
    return out
