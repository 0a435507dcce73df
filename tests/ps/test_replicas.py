"""Copies of hot rows (``sharding/plan.py`` ``Replicas``, ``ps/server/replicas.py``): a worker reads a
table's hot rows from its own server of copies, never a copy older than the bound; gradients go
to the rows' own servers alone; refreshes, bad requests and checkpoint loads leave nothing stale
to be served."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cardinal import cli, planner
from cardinal.embedding import TableConfig
from cardinal.planner import hot
from cardinal.ps import PSClient, ShardStore, StoreConfig
from cardinal.ps.server.replicas import CopiedRows
from cardinal.ps.transport.inprocess import InProcessTransport
from cardinal.sharding.plan import Piece, Replicas, ShardingPlan
from cardinal.train import tables
from cardinal.train.readers import make_readers
from helpers.recipes import tiny_recipe

N = 4
HOT = tuple(range(0, 40))  # the copied ids of "user"
STALENESS = 3


def config(opt="sgd") -> StoreConfig:
    return StoreConfig((TableConfig("user", 6, seed=1, init_scale=0.5), TableConfig("item", 3, seed=2)),
                       {"name": opt, "lr": 0.1})


def copied_plan(servers=(2,), staleness=STALENESS, hot=HOT) -> ShardingPlan:
    return ShardingPlan(N, {"user": (Piece(servers),)}, {"user": Replicas(hot, staleness)})


def job(plan=None, workers=2, opt="sgd"):
    """``workers`` clients of one set of stores, each its worker; and a client reading the rows
    from their own servers (the plan without copies)."""
    plan = plan or copied_plan()
    stores = [ShardStore(config(opt), s, N, plan=plan) for s in range(N)]
    clients = [PSClient(InProcessTransport(stores), plan=plan, worker=w, workers=workers) for w in range(workers)]
    truth = PSClient(InProcessTransport(stores), plan=ShardingPlan(N, plan.tables))
    return stores, clients, truth


def copies(stores, table="user") -> list[dict]:
    return [s.stats()["replicas"][f"{table}-replica"] for s in stores]


IDS = np.arange(-30, 90, dtype=np.int64)  # hot ids 0..39 and cold ones


# --- the plan ------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, text", [
    (lambda: Replicas(()), "non-empty list of int64 ids"),
    (lambda: Replicas((1, 1)), "distinct"),
    (lambda: Replicas((1, 2**63)), "int64 ids"),
    (lambda: Replicas((1, 2.0)), "int64 ids"),
    (lambda: Replicas((1,), 0), "staleness must be an integer >= 1"),
    (lambda: Replicas((1,), True), "staleness must be an integer >= 1"),
    (lambda: ShardingPlan(N, {}, {"user": Replicas((1,))}), "row-wise over every server"),
    (lambda: ShardingPlan(N, {"user": (Piece((0,), (0, 2)), Piece((1,), (2, 6)))}, {"user": Replicas((1,))}),
     "split by columns"),
    (lambda: ShardingPlan(N, {"user": (Piece((0,)),)}, {"user": (1, 2)}), "must be a Replicas"),
])
def test_bad_copies_are_named(spec, text):
    with pytest.raises((ValueError, TypeError), match=text):
        spec()


def test_copies_of_an_unknown_table_or_a_clashing_name_are_refused():
    with pytest.raises(ValueError, match="places table 'nope'"):
        ShardingPlan(N, {"nope": (Piece((0,)),)}, {"nope": Replicas((1,))}).shard_config(config(), 0)
    clash = StoreConfig((TableConfig("user", 6), TableConfig("user-replica", 3)))
    for shard in range(N):  # on a server that holds neither table too
        with pytest.raises(ValueError, match="the piece 'user-replica' has the name of a table"):
            copied_plan().shard_config(clash, shard)
    ShardingPlan(N, copied_plan().tables).shard_config(clash, 0)  # without copies the name is free


def test_a_plan_with_copies_survives_json_and_one_without_reads_as_before():
    plan = copied_plan()
    assert ShardingPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    assert plan.to_json()["replicas"] == {"user": {"ids": list(HOT), "staleness": STALENESS}}
    assert "replicas" not in ShardingPlan(N, plan.tables).to_json()
    assert "copied_ids" not in PSClient(InProcessTransport([ShardStore(config(), s, N) for s in range(N)])).metrics()
    for bad in ({"user": {"ids": [1], "staleness": 2, "x": 1}}, {"user": [1, 2]}, []):
        with pytest.raises(ValueError, match="plan.layout f: .*replicas"):
            ShardingPlan.from_json({**plan.to_json(), "replicas": bad}, "plan.layout f")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-50, 50), max_size=80), st.sets(st.integers(-50, 50), min_size=1, max_size=30),
       st.sampled_from([(1,), (0, 3), (3, 1, 2)]), st.integers(0, 9))
def test_each_id_is_read_from_its_own_server_or_else_a_hot_one_from_the_workers_copies(ids, hot, servers, worker):
    plan = ShardingPlan(N, {"user": (Piece(servers),)}, {"user": Replicas(tuple(hot))})
    ids = np.asarray(ids, np.int64)
    shards, copied = plan.read_route("user", ids, worker)
    own = plan.route("user", ids)
    reader = (servers[0] + worker) % N
    want = np.isin(ids, list(hot)) & (own != reader)
    assert np.array_equal(copied if copied is not None else np.zeros(len(ids), bool), want)
    assert np.array_equal(shards, np.where(want, reader, own))


def test_workers_read_copies_from_servers_in_turn():
    plan = copied_plan((2,))
    assert [plan.reader("user", w) for w in range(6)] == [2, 3, 0, 1, 2, 3]


# --- one server's copies -------------------------------------------------------------------------

def test_copies_answer_only_within_their_bound_and_a_bad_refresh_changes_nothing():
    c = CopiedRows("user", Replicas((5, 1, 9), 2), 2)
    ids = np.array([9, 1], np.int64)
    assert c.read(ids, 0).shape == (0, 2)  # before the first refresh
    c.write(np.array([9], np.int64), np.array([[9, 9]], np.float32), 10)  # a refresh in parts (a split request)
    assert c.read(ids, 10).shape == (0, 2) and c.read(ids[:1], 10).tolist() == [[9, 9]]  # 1 has no copy yet
    rows = np.array([[1, 1], [5, 5], [9, 9]], np.float32)
    c.write(np.array([1, 5], np.int64), rows[:2], 10)
    assert c.read(ids, 12).tolist() == [[9, 9], [1, 1]]
    assert c.read(ids, 4).tolist() == [[9, 9], [1, 1]]  # a worker behind the refresher reads newer rows
    assert c.read(ids, 13).shape == (0, 2)
    for bad_ids, bad_rows, text in [(np.array([1, 5, 7], np.int64), rows, "id 7 is not one of"),
                                    (np.array([1, 5, 9], np.int64), rows[:, :1], "shape"),
                                    (np.array([1, 5, 9], np.int64), rows[:2], "shape"),
                                    (np.array([1, 5, 9], np.int64), rows * np.nan, "NaN")]:
        with pytest.raises(ValueError, match=text):
            c.write(bad_ids, bad_rows, 11)
    with pytest.raises(ValueError, match="id 4 is not one of table 'user'"):
        c.read(np.array([4], np.int64), 10)
    c.write(np.array([9, 5, 1], np.int64), rows * 0, 9)  # older than the copies held: ignored
    c.write(np.array([5, 5], np.int64), np.array([[6, 6], [6, 6]], np.float32), 11)  # newer, for one id
    assert c.stats() == {"table": "user", "dim": 2, "rows": 3, "staleness": 2, "as_of": 10, "bytes": 48, "reads": 5,
                         "stale": 6, "refreshed": 5}
    assert c.read(np.array([5, 1], np.int64), 12).tolist() == [[6, 6], [1, 1]]
    c.forget()
    assert c.read(ids, 10).shape == (0, 2) and c.stats()["as_of"] is None


def test_a_store_takes_only_refreshes_for_its_copies_and_no_refresh_for_a_table():
    store = ShardStore(config(), 0, N, plan=copied_plan())
    hot, rows = np.asarray(HOT, np.int64), np.ones((len(HOT), 6), np.float32)
    with pytest.raises(ValueError, match="kind 'replica' .* got kind 'grad' to 'user-replica'"):
        store.push("user-replica", hot, rows, step=1)
    with pytest.raises(ValueError, match="got kind 'replica' to 'item'"):
        store.push("item", hot, rows[:, :3], step=1, kind="replica")
    assert store.stats()["replicas"]["user-replica"]["refreshed"] == 0
    store.push("user-replica", hot, rows, step=1, kind="replica")
    assert store.pull("user-replica", hot[:3], step=2).tolist() == [[1.0] * 6] * 3
    assert "user-replica" not in store.stats()["tables"]


# --- a job's workers -----------------------------------------------------------------------------

def test_a_copy_read_is_the_row_as_of_the_last_refresh_never_older_than_the_bound():
    """Worker 0 refreshes; worker 1 reads hot rows from its copies on server 3. Each hot row
    worker 1 reads is the row a pull of the refresh's step gave, that step within the bound;
    every other row is the row as it is now."""
    stores, (w0, w1), truth = job()
    hot = np.isin(IDS, HOT)
    rng = np.random.default_rng(3)
    refreshed, snapshot = None, None
    for step in range(1, 12):
        before = w0.metrics().get("copy_refresh_ids", 0)
        w0.pull("user", IDS, step=step).wait()
        if w0.metrics()["copy_refresh_ids"] > before:
            refreshed, snapshot = step, truth.pull("user", IDS, create=False).wait()
        now = truth.pull("user", IDS, create=False).wait()
        got = w1.pull("user", IDS, step=step).wait()
        assert step - refreshed < STALENESS
        assert got[hot].tobytes() == snapshot[hot].tobytes()
        assert got[~hot].tobytes() == now[~hot].tobytes()
        for w in (w0, w1):
            w.push("user", IDS, rng.standard_normal((len(IDS), 6)).astype(np.float32), step=step).wait()
    assert w1.metrics()["copied_ids"] == 11 * len(HOT) and w1.metrics()["copied_stale_ids"] == 0
    assert w0.metrics()["copied_ids"] == 0  # worker 0 reads server 2, where the table is
    stats = copies(stores)
    assert [s["reads"] for s in stats] == [0, 0, 0, 11 * len(HOT)]
    assert [s["refreshed"] for s in stats] == [0, 0, 0, 4 * len(HOT)]  # steps 1, 4, 7, 10; server 2 holds the rows
    from prometheus_client import generate_latest

    from cardinal.ps.server.metrics import ShardMetrics
    scraped = generate_latest(ShardMetrics(stores[3]).registry).decode()
    assert f'cardinal_ps_copied_reads_total{{shard="3",table="user"}} {11 * len(HOT)}.0' in scraped
    assert f'cardinal_ps_copies_refreshed_total{{shard="3",table="user"}} {4 * len(HOT)}.0' in scraped


def test_copies_past_their_bound_are_read_from_the_rows_own_servers():
    stores, (w0, w1), truth = job()
    w0.pull("user", IDS, step=1).wait()  # refreshed at step 1, then worker 0 stalls
    w0.push("user", IDS, np.ones((len(IDS), 6), np.float32), step=1).wait()
    got = w1.pull("user", IDS, step=1 + STALENESS + 1).wait()
    assert got.tobytes() == truth.pull("user", IDS, create=False).wait().tobytes()
    assert w1.metrics()["copied_stale_ids"] == len(HOT) and w1.metrics()["copied_ids"] == 0
    assert copies(stores)[3]["stale"] == len(HOT)


def test_gradients_of_hot_rows_go_to_their_own_server_only():
    stores, (w0, w1), truth = job(opt="adam")
    for step in (1, 2):
        for w in (w0, w1):
            w.pull("user", IDS, step=step).wait()
            w.push("user", IDS, np.ones((len(IDS), 6), np.float32), step=step).wait()
    plain = [ShardStore(config("adam"), s, N, plan=ShardingPlan(N, copied_plan().tables)) for s in range(N)]
    ref = PSClient(InProcessTransport(plain), plan=ShardingPlan(N, copied_plan().tables))
    for step in (1, 2):
        for _ in (w0, w1):
            ref.pull("user", IDS, step=step).wait()
            ref.push("user", IDS, np.ones((len(IDS), 6), np.float32), step=step).wait()
    assert values_and_state(stores) == values_and_state(plain)  # the copies changed no row, no optimizer state


def values_and_state(stores, table="user") -> dict[int, bytes]:
    """id -> its stored words (values and optimizer state): the digest without the sightings, which
    copies do not count on the rows' own servers."""
    out = {}
    for s in stores:
        if table in s.tables:
            for c in s.tables[table].row_chunks(1 << 20):
                out.update({int(i): c.data[k].tobytes() for k, i in enumerate(c.ids)})
    return out


def test_each_table_is_refreshed_by_one_worker_and_each_refresh_goes_where_copies_are_read():
    plan = ShardingPlan(N, {"user": (Piece((1,)),), "item": (Piece((0, 2)),)},
                        {"user": Replicas(HOT, 2), "item": Replicas((1, 2, 3), 2)})
    stores, clients, _ = job(plan, workers=3)
    for step in (1, 2):
        for c in clients:
            for t, d in (("user", 6), ("item", 3)):
                c.pull(t, IDS, step=step).wait()
    assert [c.reader.refreshes for c in clients] == [{"item"}, {"user"}, set()]
    assert [s["refreshed"] for s in copies(stores, "user")] == [0, 0, 40, 40]  # readers 1, 2, 3; 1 holds the rows
    own = plan.route("item", np.array([1, 2, 3], np.int64))  # readers 0, 1, 2: each that lacks one of the rows
    assert [s["refreshed"] for s in copies(stores, "item")] == [3 * int(s < 3 and (own != s).any()) for s in range(N)]
    assert (own == 0).all() or (own == 2).all()  # this plan's hot ids, all on one server: it needs no copies


def test_a_loaded_checkpoint_leaves_no_copy_to_be_served(tmp_path):
    stores, (w0, w1), truth = job()
    w0.pull("user", IDS, step=1).wait()
    w0.save(tmp_path / "ckpt", 1)
    w0.push("user", IDS, np.ones((len(IDS), 6), np.float32), step=1).wait()
    w0.pull("user", IDS, step=2).wait()
    w0.load(tmp_path / "ckpt")
    assert all(c["as_of"] is None for c in copies(stores))
    got = w1.pull("user", IDS, step=2).wait()  # no copy: from the rows' own servers, as the checkpoint has them
    assert got.tobytes() == truth.pull("user", IDS, create=False).wait().tobytes()
    w0.pull("user", IDS, step=2).wait()  # the refresher loaded: it refreshes again
    assert copies(stores)[3]["as_of"] == 2
    w0.pull("user", IDS, step=5).wait()  # refreshed at 5
    w1.load(tmp_path / "ckpt")  # another worker loads: the refresher sees only its steps go back
    assert copies(stores)[3]["as_of"] is None
    w0.pull("user", IDS, step=2).wait()
    assert copies(stores)[3]["as_of"] == 2
    w1.pull("user", IDS, step=2).wait()
    assert w1.metrics()["copied_ids"] == len(HOT)


def test_a_refused_pull_refreshes_nothing():
    stores, (w0, _), _ = job()
    for bad, kind in (({"create": 1}, TypeError), ({"step": -1}, ValueError), ({"step": True}, ValueError)):
        with pytest.raises(kind):
            w0.pull("user", IDS, **bad)
    assert all(c["as_of"] is None and c["refreshed"] == 0 for c in copies(stores))
    assert len(stores[2].tables["user"]) == 0
    with pytest.raises(TypeError, match="create must be a bool"):
        stores[3].pull("user-replica", np.asarray(HOT[:2], np.int64), create=1)


def test_a_hot_row_past_the_pull_codecs_range_is_named_as_such():
    stores, (w0, _), _ = job()
    w0.pull("user", IDS, step=1).wait()
    w0.push("user", IDS, np.full((len(IDS), 6), -1e6, np.float32), step=1).wait()  # rows ~1e5: past fp16
    fp16 = PSClient(InProcessTransport(stores), plan=copied_plan(), worker=0, workers=2, pull_codec="fp16")
    with pytest.raises(ValueError, match="past what the pull codec 'fp16' .* carries"):
        fp16.pull("user", IDS, step=5)  # the refresh's pull, before any copy is written


def test_the_worker_cache_refuses_a_table_with_copies():
    import torch  # noqa: F401 - the cache's rows are tensors

    from cardinal.worker.sources.cache import CachedSource
    from cardinal.worker.sources.ps import PSSource
    _, (w0, _), _ = job()
    with pytest.raises(ValueError, match="table 'user' has copies of its hot rows .* the two bounds would add up"):
        CachedSource(PSSource(w0), {"user": 6}, 1 << 20, 2, {"name": "sgd"})
    CachedSource(PSSource(w0), {"item": 3}, 1 << 20, 2, {"name": "sgd"})  # a table without copies is cached


def test_copies_take_their_bytes_from_the_memory_budget():
    from cardinal.ps.limits import StoreLimits
    big = copied_plan(hot=tuple(range(10_000)))  # 10,000 x (6 floats + a step) = 320,000 bytes a server
    store = ShardStore(config(), 0, N, limits=StoreLimits(memory_budget=1_000_000), plan=big)
    assert store.memory.budget == 680_000
    assert store.stats()["bytes"] == 320_000 + sum(t.nbytes for t in store.tables.values())
    assert store.stats()["memory_budget"] == 1_000_000
    with pytest.raises(ValueError, match="the copies of hot rows .* take 320000 bytes on each server, "
                                         "ps.memory.budget is 300000"):
        ShardStore(config(), 0, N, limits=StoreLimits(memory_budget=300_000), plan=big)


def test_a_checkpoint_records_the_copies_and_loads_into_plans_with_or_without_them(tmp_path):
    from cardinal.checkpoint import layout
    from cardinal.checkpoint.reader import Reader

    stores, (w0, w1), truth = job()
    for step in (1, 2):
        for w in (w0, w1):
            w.pull("user", IDS, step=step).wait()
            w.push("user", IDS, np.ones((len(IDS), 6), np.float32), step=step).wait()
    path = w0.save(tmp_path / "ckpt", 2)
    assert Reader(path).plan == copied_plan()
    want = truth.pull("user", IDS, create=False).wait()
    for plan in (ShardingPlan(N), copied_plan((0, 3)), ShardingPlan(N, copied_plan().tables)):
        other = [ShardStore(config(), s, N, plan=plan) for s in range(N)]
        client = PSClient(InProcessTransport(other), plan=plan)
        client.load(layout.latest(tmp_path / "ckpt"))
        assert client.pull("user", IDS, create=False).wait().tobytes() == want.tobytes()
    hashed = PSClient(InProcessTransport([ShardStore(config(), s, N) for s in range(N)]))
    hashed.pull("user", IDS, step=1).wait()
    hashed.save(tmp_path / "hash", 1)  # and a hash plan's checkpoint into the plan with copies
    w0.load(tmp_path / "hash")
    assert truth.pull("user", IDS, create=False).wait().tobytes() == hashed.pull("user", IDS, create=False).wait().tobytes()
    assert all(c["as_of"] is None for c in copies(stores))


def test_a_servers_plan_in_its_stats_names_copied_ids_by_count_and_checksum():
    many = copied_plan(hot=tuple(range(0, 2_000_000, 7)))
    summary = ShardStore(config(), 0, N, plan=many).stats()["plan"]
    assert summary["replicas"]["user"] == {"ids": {"n": 285715, "crc32": summary["replicas"]["user"]["ids"]["crc32"]},
                                          "staleness": STALENESS}
    assert len(json.dumps(summary)) < 500  # a stats reply's header holds it (the wire's limit is 16 KB)
    assert copied_plan(hot=HOT[:-1]).summary() != copied_plan().summary()


def test_copies_over_grpc(tmp_path):
    from cardinal.ps.server.process import ServerOptions, ShardServer
    from cardinal.ps.transport.grpc_transport import GrpcTransport
    plan, servers, clients = copied_plan(hot=HOT + tuple(range(10**6, 10**6 + 3000))), [], []  # 3,040 ids
    try:
        for k in range(N):
            servers.append(ShardServer(ShardStore(config(), k, N, plan=plan), tmp_path, "job", "tok",
                                       ServerOptions()).start())
        addresses = [f"127.0.0.1:{s.port}" for s in servers]
        clients = [PSClient(GrpcTransport(addresses, "job", "tok", timeout=20, chunk_mb=0.01), plan=plan, worker=w,
                            workers=2, pull_codec="bf16") for w in range(2)]  # a refresh in 10 requests
        clients[0].check_plan(["user", "item"])
        for other in (ShardingPlan(N, plan.tables), copied_plan(staleness=STALENESS + 1),
                      ShardingPlan(N, plan.tables, {"user": Replicas(HOT[1:], STALENESS)})):
            with pytest.raises(ValueError, match="server 0 was started with another sharding plan \\(the same "
                                                 "placement, other copies of hot rows: "):
                PSClient(clients[0].transport, plan=other).check_plan(["user", "item"])
        _, (l0, l1), _ = job(plan)
        local = [PSClient(c.transport, plan=plan, worker=w, workers=2, pull_codec="bf16")
                 for w, c in enumerate((l0, l1))]
        for step in (1, 2, 3, 4, 5):
            for c, ref in zip(clients, local):
                a, b = c.pull("user", IDS, step=step).wait(), ref.pull("user", IDS, step=step).wait()
                assert a.tobytes() == b.tobytes()
                grads = np.full((len(IDS), 6), 0.5, np.float32)
                c.push("user", IDS, grads, step=step).wait()
                ref.push("user", IDS, grads, step=step).wait()
        assert clients[1].metrics()["copied_ids"] == 5 * len(HOT)
        late = clients[1].pull("user", IDS, step=5 + STALENESS + 1).wait()  # past the bound: no copy over the wire
        assert late.tobytes() == local[1].pull("user", IDS, step=5 + STALENESS + 1).wait().tobytes()
        assert clients[1].metrics()["copied_stale_ids"] == len(HOT)
        assert clients[0].stats()[3]["replicas"]["user-replica"]["reads"] == 5 * len(HOT)
    finally:
        for c in clients:
            c.transport.close()
        for s in servers:
            s.stop(0)


# --- choosing the hot ids ------------------------------------------------------------------------

def test_cardinal_plan_copies_the_ids_in_the_most_batches(tmp_path, capsys):
    from helpers.recipes import plan_args

    first = tmp_path / "first.json"
    assert cli.main([*plan_args(tmp_path), "--out", str(first)]) == 0
    proposed = planner.read(first)
    table = next(t for t, (p,) in sorted(proposed.tables.items()) if len(p.servers) == 1 and not t.startswith("lr_"))
    capsys.readouterr()
    assert cli.main([*plan_args(tmp_path, "plan.replicate={C99=5}")]) == 2
    assert "plan.replicate: no table 'C99'" in capsys.readouterr().err
    out = tmp_path / "plan.json"
    sets = [f"plan.replicate={{{table}=5}}", "plan.replica_staleness=2"]  # as the error for a plan file says
    assert cli.main([*plan_args(tmp_path, *sets), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{table}'s 5 hottest ids" in printed
    assert "plan.replicate" not in printed.splitlines()[-1]  # the printed command trains with the file alone
    plan = planner.read(out)
    assert set(plan.replicas) == {table} and plan.replicas[table].staleness == 2 and plan.tables == proposed.tables
    r = tiny_recipe(tmp_path, "data.batch_size=256", "embedding.shared=false")  # plan_args' data and batches
    train, _, _ = make_readers(r.data, r.train.seed, progress=False)
    batches: dict[int, int] = {}  # slowly: the batches each id is in
    for batch in train:
        for i in set(batch.sparse[table].values.tolist()):
            batches[i] = batches.get(i, 0) + 1
    top = sorted(batches.values(), reverse=True)[:5]
    assert sorted(batches[i] for i in plan.replicas[table].ids) == sorted(top)
    r = tiny_recipe(tmp_path, "embedding.shared=false", 'plan.layout="auto"', *sets)
    spread, lines = planner.replicate(tables.plan_inputs(r), ShardingPlan(4))
    assert spread == ShardingPlan(4) and lines == [f"no copies of {table}: the plan spreads it over every server, "
                                                   "which spreads its reads already"]


@pytest.mark.parametrize("sets, text", [
    (["plan.replicate={C1=5}"], 'plan.replicate copies hot rows in the planner\'s plan: set plan.layout = "auto", '
                                'or make a plan file with `cardinal plan RECIPE --set plan.replicate=... --out FILE`'),
    (['plan.layout="auto"', "plan.replicate={C1=0}"], "plan.replicate must map tables to a number of hot ids >= 1"),
    (['plan.layout="auto"', 'plan.replicate={C1="x"}'], "plan.replicate must map tables"),
    (['plan.layout="auto"', "plan.replica_staleness=0"], "plan.replica_staleness must be an integer >= 1"),
])
def test_bad_replicate_settings_are_named(tmp_path, sets, text):
    with pytest.raises(ValueError, match=text):
        tiny_recipe(tmp_path, *sets)


# --- a job ---------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(300)
def test_launch_two_workers_with_auto_and_replicate_read_a_tables_hot_rows_from_copies(tmp_path):
    """`cardinal launch --servers 2 --workers 2` with plan.layout = "auto" and plan.replicate: the
    launcher's plan copies C1's hot rows (the planner keeps C1 whole on one server here), hands
    the processes the file alone, and worker 1 reads them from the other server."""
    from helpers.launch import launch_cmd, leftovers, run_launch

    sets = ["embedding.shared=false", "train.steps=8", "eval.every=0", 'plan.layout="auto"',
            "plan.replicate={C1=20}", "plan.replica_staleness=2"]
    code, out = run_launch(launch_cmd(tmp_path, 2, 2, *sets))
    assert code == 0, out[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    plan = planner.read(run_dir / "plan.json")
    assert len(plan.pieces("C1")[0].servers) == 1 and len(plan.replicas["C1"].ids) == 20
    assert plan.replicas["C1"].staleness == 2
    recipe = json.loads((run_dir / "recipe.json").read_text())
    assert recipe["plan"]["layout"] == str(run_dir / "plan.json") and recipe["plan"]["replicate"] == {}
    summary = json.loads((run_dir / "summary.json").read_text())
    last = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in x][-1]
    assert summary["steps"] == 8 and np.isfinite(last["loss"])
    assert summary["copied_ids_per_sample"] > 0  # worker 1's reads of C1's hot rows
    # past the bound (read from C1's server instead): a pull before the first refresh, or one of a
    # step worker 0 has not refreshed for yet (the workers may be ps.staleness steps apart)
    assert summary["copied_stale_ids_per_sample"] < summary["copied_ids_per_sample"]
    assert leftovers(tmp_path) == []
