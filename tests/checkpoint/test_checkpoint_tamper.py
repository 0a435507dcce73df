"""Checkpoints broken the way users break them: each load is refused with a ValueError naming
the file, and every shard keeps its rows (digest and every pulled value, bit for bit).

Most edits are resealed (every checksum recomputed, ``checkpoint_edit.reseal``), so the load
must catch what the edit means. The damage is done to the last shard, so a load that replaced
shards one by one would already have replaced the first.
"""

import numpy as np
import pytest

from cardinal.checkpoint import layout
from cardinal.ps import connect
from helpers.checkpoint_edit import edit_json, reseal, rewrite_columns
from test_checkpoint import CONFIG, assert_same_values, digests, trained, values

SHARD0, SHARD1 = "shard-00000-of-00002", "shard-00001-of-00002"


def commit_n_shards(step):
    edit_json(step / "commit.json", lambda c: c.update(n_shards=1))
    reseal(step)


def commit_drop_shard(step):
    def drop(c):
        if isinstance(c["shards"], dict):
            del c["shards"][SHARD1]
        else:
            c["shards"].remove(SHARD1)
    edit_json(step / "commit.json", drop)
    reseal(step)


def commit_unlist_manifest(step):
    edit_json(step / "commit.json", lambda c: c.get("files", {}).pop(f"{SHARD1}/manifest.json", None))
    edit_json(step / SHARD1 / "manifest.json",  # unlisted, then edited where no other check looks
              lambda m: m["tables"]["user"].update(init_scale=0.5))
    reseal(step)


def commit_edited_unsealed(step):
    edit_json(step / "commit.json", lambda c: c["extra"].update(note="edited"))


def broadcast_data(step):
    rewrite_columns(step / SHARD1, "user", lambda cols: cols.update(data=cols["data"][:1]))  # (1, width)
    reseal(step)


def swap_shards(step):
    for column in layout.COLUMNS:
        a, b = step / SHARD0 / f"user.{column}.npy", step / SHARD1 / f"user.{column}.npy"
        tmp = a.with_suffix(".tmp")
        a.rename(tmp)
        b.rename(a)
        tmp.rename(b)
    counts = {s: len(np.load(step / s / "user.ids.npy")) for s in (SHARD0, SHARD1)}
    for s in (SHARD0, SHARD1):
        edit_json(step / s / "manifest.json", lambda m, s=s: m["tables"]["user"].update(rows=counts[s]))
    reseal(step)


def nan_row(step):
    def poison(cols):
        cols["data"][len(cols["data"]) // 2, 0] = np.nan
    rewrite_columns(step / SHARD1, "user", poison)
    reseal(step)


def duplicate_id(step):
    rewrite_columns(step / SHARD1, "user", lambda cols: cols.update(
        {c: np.concatenate([a, a[:1]]) for c, a in cols.items()}))
    reseal(step)


def wrong_width(step):
    rewrite_columns(step / SHARD1, "user", lambda cols: cols.update(data=cols["data"][:, :-1].copy()))
    reseal(step)


def point_outside(step):
    outside = step.parent / "outside.npy"  # where shard-00001-of-00002/../../outside.npy lands
    outside.write_bytes((step / SHARD1 / "user.ids.npy").read_bytes())
    edit_json(step / SHARD1 / "manifest.json", lambda m: m["tables"]["user"]["files"]["ids"].update(
        file="../../outside.npy"))
    reseal(step)


def absolute_path(step):
    target = str((step / SHARD1 / "user.ids.npy").resolve())
    edit_json(step / SHARD1 / "manifest.json", lambda m: m["tables"]["user"]["files"]["ids"].update(file=target))
    reseal(step)


def rename_file(step):
    (step / SHARD1 / "user.count.npy").rename(step / SHARD1 / "user.counts.npy")
    edit_json(step / SHARD1 / "manifest.json", lambda m: m["tables"]["user"]["files"]["count"].update(
        file="user.counts.npy"))
    reseal(step)


def manifest_step(step):
    edit_json(step / SHARD1 / "manifest.json", lambda m: m.update(step=2))
    reseal(step)


def truncate(step):
    path = step / SHARD1 / "item.data.npy"
    path.write_bytes(path.read_bytes()[:-12])


CASES = {  # edit -> what the error names
    commit_n_shards: "commit.json", commit_drop_shard: "commit.json", commit_unlist_manifest: "commit.json",
    commit_edited_unsealed: "commit.json",
    broadcast_data: "user.data.npy", swap_shards: "user.ids.npy", nan_row: "user.data.npy",
    duplicate_id: "user.ids.npy", wrong_width: "user.data.npy", point_outside: "manifest.json",
    absolute_path: "manifest.json", rename_file: "manifest.json", manifest_step: "manifest.json",
    truncate: "item.data.npy",
}


@pytest.mark.parametrize("loaded", [2, 3])
@pytest.mark.parametrize("edit", list(CASES), ids=[f.__name__ for f in CASES])
def test_a_tampered_checkpoint_is_refused_and_changes_nothing(tmp_path, rng, edit, loaded):
    trained(2, rng).save(tmp_path / "ckpt", step=3)
    edit(layout.step_dir(tmp_path / "ckpt", 3))
    target = trained(loaded, np.random.default_rng(7), steps=2)
    ids = {t: target.seen[t] | set(range(-3000, 3000, 7)) for t in target.seen}
    before, rows = digests(target), values(target, ids)
    with pytest.raises(ValueError, match=CASES[edit]):
        target.load(tmp_path / "ckpt")
    assert digests(target) == before
    assert_same_values(values(target, ids), rows)
    for store in target.transport.stores:
        store.check()
