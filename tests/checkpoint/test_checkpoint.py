"""Checkpoints: round trip, resharding, verification that names the bad file, crashes at every step."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cardinal import failpoints
from cardinal.checkpoint import layout
from cardinal.embedding import TableConfig
from cardinal.ps import ShardStore, StoreConfig, connect
import helpers
from helpers.checkpoint_edit import reseal

CONFIG = StoreConfig((TableConfig("user", 4), TableConfig("item", 3)), {"name": "adagrad"})


def trained(n_shards, rng, steps=3):
    client = connect(CONFIG, n_shards)
    client.seen = {"user": set(), "item": set()}  # every id trained, to pull back after a load
    for step in range(1, steps + 1):
        for table, dim in (("user", 4), ("item", 3)):
            ids = rng.integers(-3000, 3000, 500).astype(np.int64)
            client.seen[table].update(ids.tolist())
            client.pull(table, ids, step=step).wait()
            client.push(table, ids, rng.standard_normal((500, dim)).astype(np.float32), step=step).wait()
    return client


def digests(client):
    return {t: client.digest(t) for t in ("user", "item")}


def values(client, ids_by_table):
    """Every listed id's row, pulled without creating anything, as raw bits."""
    return {t: client.pull(t, np.array(sorted(ids), np.int64), create=False).wait().view(np.uint32)
            for t, ids in ids_by_table.items()}


def assert_same_values(a, b):
    assert a.keys() == b.keys()
    for t in a:
        np.testing.assert_array_equal(a[t], b[t])


@pytest.mark.parametrize("saved, loaded", [(2, 2), (2, 3), (2, 1), (1, 4)])
def test_round_trip_into_any_shard_count(tmp_path, rng, saved, loaded):
    source = trained(saved, rng)
    before = values(source, source.seen)
    path = source.save(tmp_path, step=3, extra={"note": "hi"})
    target = connect(CONFIG, loaded)
    info = target.load(tmp_path)
    assert info["step"] == 3 and info["extra"] == {"note": "hi"} and info["path"] == str(path)
    assert_same_values(values(target, source.seen), before)  # every row, on the shard that serves it
    assert digests(target) == digests(source)
    for store in target.transport.stores:
        store.check()


def test_manifest_records_what_a_reader_needs(tmp_path, rng):
    trained(2, rng).save(tmp_path, step=3)
    manifest = json.loads((layout.step_dir(tmp_path, 3) / "shard-00001-of-00002" / "manifest.json").read_text())
    assert manifest["shard"] == 1 and manifest["n_shards"] == 2 and manifest["step"] == 3
    assert "murmur3" in manifest["routing"] and manifest["format_version"] == layout.FORMAT_VERSION
    user = manifest["tables"]["user"]
    assert user["dim"] == 4 and user["optimizer"]["name"] == "adagrad" and user["optimizer"]["lr"] == 0.05
    assert set(user["files"]) == {"ids", "data", "count", "last_step"}
    assert all({"file", "bytes", "crc32"} <= set(f) for f in user["files"].values())


def test_newer_save_removes_older_only_after_commit(tmp_path, rng):
    client = trained(2, rng)
    client.save(tmp_path, 1)
    client.save(tmp_path, 2, keep=2)
    client.save(tmp_path, 3, keep=2)
    assert layout.committed_steps(tmp_path) == [2, 3]
    with pytest.raises(ValueError, match="already exists"):
        client.save(tmp_path, 3)


def _files(tmp_path, step=3):
    return sorted((layout.step_dir(tmp_path, step)).glob("shard-*/user.data.npy"))


@pytest.mark.parametrize("damage", ["flip", "truncate", "remove", "manifest", "pickle"])
def test_load_refuses_damaged_files_naming_them_and_changes_nothing(tmp_path, rng, damage):
    trained(2, rng).save(tmp_path, 3)
    victim = _files(tmp_path)[0]
    if damage == "flip":
        raw = bytearray(victim.read_bytes())
        raw[-3] ^= 0xFF
        victim.write_bytes(bytes(raw))
    elif damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:-10])
    elif damage == "remove":
        victim.unlink()
    elif damage == "manifest":
        victim = victim.parent / "manifest.json"
        victim.write_text(victim.read_text().replace('"dim": 4', '"dim": 5'))
    elif damage == "pickle":  # an object array with a manifest that matches it: still refused
        np.save(victim, np.array([{"x": 1}], dtype=object), allow_pickle=True)
        reseal(victim.parent.parent)
    target = trained(3, np.random.default_rng(1), steps=1)
    before, rows = digests(target), values(target, target.seen)
    with pytest.raises(ValueError, match=str(victim.name)):
        target.load(tmp_path)
    assert digests(target) == before
    assert_same_values(values(target, target.seen), rows)


def test_load_refuses_a_different_table_layout(tmp_path, rng):
    trained(2, rng).save(tmp_path, 3)
    other = StoreConfig((TableConfig("user", 8), TableConfig("item", 3)), {"name": "adagrad"})
    with pytest.raises(ValueError, match="table 'user' has dim 4, the store expects 8"):
        ShardStore(other).load(str(layout.step_dir(tmp_path, 3)))
    sgd = StoreConfig(CONFIG.tables, {"name": "sgd"})
    with pytest.raises(ValueError, match="trained with 'adagrad'"):
        ShardStore(sgd).load(str(layout.step_dir(tmp_path, 3)))


def test_uncommitted_checkpoint_is_never_loaded(tmp_path, rng):
    client = trained(2, rng)
    client.save(tmp_path, 1)
    client.transport.save(0, str(tmp_path), 2).wait()  # shard files, but no commit marker
    assert layout.latest(tmp_path) == layout.step_dir(tmp_path, 1)
    with pytest.raises(ValueError, match="not a committed checkpoint"):
        connect(CONFIG, 2).load(layout.step_dir(tmp_path, 2))


def test_raise_failpoint_keeps_previous_checkpoint(tmp_path, rng, monkeypatch):
    client = trained(2, rng)
    client.save(tmp_path, 1)
    saved = digests(client)
    client.push("user", np.array([1], np.int64), np.ones((1, 4), np.float32), step=2).wait()
    monkeypatch.setenv(failpoints.ENV, "save.before_commit=raise")
    with pytest.raises(failpoints.FailpointError):
        client.save(tmp_path, 2)
    monkeypatch.delenv(failpoints.ENV)
    fresh = connect(CONFIG, 2)
    assert fresh.load(tmp_path)["step"] == 1 and digests(fresh) == saved


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point, survivor, tiers", [
    ("save.shard_file_written", 1, False),
    ("save.before_shard_manifest", 1, False),
    ("save.before_commit", 1, False),
    ("save.before_cleanup", 2, False),
    ("tier.before_put", 1, True),            # a disk tier's write while training step 2
    ("tier.before_delete", 1, True),
    ("save.shard_file_written", 1, True),    # step 2 is a delta on step 1
    ("save.before_commit", 1, True),
    ("save.before_cleanup", 2, True),
])
@pytest.mark.slow
def test_crash_at_each_step_of_a_save_leaves_a_loadable_checkpoint(tmp_path, point, survivor, tiers):
    script = Path(helpers.__file__).with_name("save_crash.py")
    env = {**__import__("os").environ, "SECOND_SAVE_FAILPOINTS": f"{point}=exit"}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path), "2", *(["tiers"] if tiers else [])], env=env,
                          capture_output=True, text=True, timeout=100)
    assert proc.returncode == failpoints.EXIT_CODE, proc.stdout + proc.stderr
    assert "saved" not in proc.stdout
    printed = {d["step"]: d for d in map(json.loads, proc.stdout.splitlines())}
    assert layout.latest(tmp_path) == layout.step_dir(tmp_path, survivor)
    client = connect(CONFIG, 3)
    assert client.load(tmp_path)["step"] == survivor
    assert digests(client) == {t: printed[survivor][t] for t in ("user", "item")}


def test_failpoint_spec_errors_are_named(monkeypatch):
    monkeypatch.setenv(failpoints.ENV, "save.before_commit=explode")
    with pytest.raises(ValueError, match="explode"):
        failpoints.failpoint("save.before_commit")


def test_load_phases_stage_off_to_the_side_until_committed(tmp_path, rng):
    source = trained(1, rng)
    source.save(tmp_path, 3)
    saved = values(source, source.seen)
    store = ShardStore(CONFIG)
    step_path = str(layout.step_dir(tmp_path, 3))
    first = store.load(step_path, "prepare")
    assert len(store.tables["user"]) == 0 and store.step == 0  # prepared, not visible
    assert store.load(step_path, "abort", first["token"]) == {"aborted": True}
    with pytest.raises(ValueError, match="no load prepared"):
        store.load(step_path, "commit", first["token"])  # aborted: nothing to commit
    older, newer = store.load(step_path, "prepare")["token"], store.load(step_path, "prepare")["token"]
    with pytest.raises(ValueError, match="no load prepared"):
        store.load(step_path, "commit", older)  # replaced by the newer prepare
    assert len(store.tables["user"]) == 0
    assert store.load(step_path, "commit", newer)["step"] == 3
    with pytest.raises(ValueError, match="phase must be"):
        store.load(step_path, "swap")
    target = connect(CONFIG, 1)
    target.transport.stores[0] = store
    assert_same_values(values(target, source.seen), saved)


def test_array_headers_are_parsed_one_thread_at_a_time(tmp_path, monkeypatch):
    """numpy parses .npy headers with ast.literal_eval, which CPython 3.11 cannot run in two threads
    at once (python/cpython#106905): the shards' threads load their arrays under one lock."""
    import ast

    from cardinal.checkpoint import durable

    durable.write_array(tmp_path / "a.npy", np.arange(3))
    seen, parse = [], ast.literal_eval
    monkeypatch.setattr(ast, "literal_eval", lambda text: (seen.append(durable._NPY_LOCK.locked()), parse(text))[1])
    for mmap in (True, False):
        assert durable.load_array(tmp_path / "a.npy", mmap=mmap).tolist() == [0, 1, 2]
    assert seen and all(seen)
