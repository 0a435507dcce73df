"""Sharding plans (``sharding/plan.py``): a plan is checked whole, routes each piece to its servers, and
changes where rows live but not what they are: with an element-wise optimizer every plan trains
bitwise the same model, and a checkpoint saved in one plan loads into any other (rows, optimizer
state, admission counters, deltas), read back through the public API."""

import json

import numpy as np
import pytest

from cardinal.checkpoint.durable import crc32_json, write_json
from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.hashing import init_rows
from cardinal.optim import make_optimizer
from cardinal.ps import PSClient, ShardStore, StoreConfig, connect
from cardinal.ps.transport.requests import Origin
from cardinal.recipe.admission import AdmissionConfig
from cardinal.sharding.plan import Piece, ShardingPlan
from cardinal.sharding.routing import route
from helpers.checkpoint_edit import reseal

DIMS = {"user": 9, "item": 4}  # odd widths: pieces split inside a pair of init_rows' values
OPTIMIZERS = {"adagrad": {"name": "adagrad", "lr": 0.1},
              "adam": {"name": "adam", "lr": 0.05},
              "sgd": {"name": "sgd", "lr": 0.1},
              "rowwise_adagrad": {"name": "rowwise_adagrad", "lr": 0.1}}
IDS = np.arange(-120, 120, dtype=np.int64)  # every id the tests train (-100..99) and some never seen


def config(opt="adagrad", admission=None, **extra) -> StoreConfig:
    tables = tuple(TableConfig(t, d, seed=k + 1, init_scale=0.5) for k, (t, d) in enumerate(DIMS.items()))
    return StoreConfig(tables, OPTIMIZERS[opt], admission or {}, **extra)


def P(*servers, columns=None) -> Piece:
    return Piece(tuple(servers), columns)


def plan(kind: str, n: int = 4) -> ShardingPlan:
    """The plans the tests move between, for ``n`` shards."""
    last = n - 1
    if kind == "hash":
        return ShardingPlan(n)
    if kind == "table":
        return ShardingPlan(n, {"user": (P(last),), "item": (P(0),)})
    if kind == "subset":  # in an order of its own
        return ShardingPlan(n, {"user": (P(last, 1) if n > 2 else P(1, 0),), "item": (P(0, last),)})
    if kind == "columns":  # an odd split point (3), a piece row-wise over two servers, one over all
        return ShardingPlan(n, {"user": (P(0, columns=(0, 3)), P(1, last, columns=(3, 9))),
                                "item": (P(last, columns=(0, 1)), P(*range(n), columns=(1, 4)))})
    if kind == "columns2":  # other splits, two pieces on one server
        return ShardingPlan(n, {"user": (P(last, columns=(0, 5)), P(0, columns=(5, 6)), P(last, columns=(6, 9))),
                                "item": (P(1, columns=(0, 2)), P(0, columns=(2, 4)))})
    raise ValueError(kind)


def train(client, steps=range(1, 4), seed=7, n=300, pulled=None):
    """Pulls (ids with duplicates) and pushes of random gradients; returns every pulled block."""
    rng = np.random.default_rng(seed)
    out = [] if pulled is None else pulled
    for step in steps:
        for table, dim in DIMS.items():
            ids = rng.integers(-100, 100, n).astype(np.int64)
            out.append(client.pull(table, ids, step=step).wait())
            grads = rng.standard_normal((n, dim)).astype(np.float32)
            counts = rng.integers(1, 3, n).astype(np.int32) if step == 2 else None
            client.push(table, ids, grads, step=step, counts=counts).wait()
            out.append(client.pull(table, ids, create=False).wait())
    return out


def lookup(client) -> dict[str, np.ndarray]:
    return {t: client.pull(t, IDS, create=False).wait() for t in DIMS}


def assert_same(a: dict, b: dict):
    for t in a:
        assert a[t].tobytes() == b[t].tobytes(), t


def stores(client) -> list[ShardStore]:
    return client.transport.stores


# --- 1. a plan is checked whole -----------------------------------------------------------------

@pytest.mark.parametrize("n", [0, -1, True, 2.0, "4", None])
def test_a_plan_needs_a_positive_integer_shard_count(n):
    with pytest.raises(ValueError, match=r"n_shards >= 1"):
        ShardingPlan(n)


@pytest.mark.parametrize("pieces, text", [
    ((), "no pieces"),
    ((P(4),), r"servers \[4\] must be distinct shards in \[0, 4\)"),
    ((P(-1),), r"servers \[-1\]"),
    ((P(1, 1),), r"servers \[1, 1\]"),
    ((P(),), r"servers \[\]"),
    ((P(True),), r"servers \[True\]"),
    ((P(0, columns=(3, 9)), P(1, columns=(0, 4))), r"servers \[0\]|cover"),
    ((P(0, columns=(0, 9)),), r"one piece holds all columns \(columns = null\)"),
    ((P(0, columns=(0, 3)), P(1, columns=(4, 9))), r"without gaps or overlap; got \[\(0, 3\), \(4, 9\)\]"),
    ((P(0, columns=(0, 5)), P(1, columns=(3, 9))), "without gaps or overlap"),
    ((P(0, columns=(1, 3)), P(1, columns=(3, 9))), r"cover \[0, width\)"),
    ((P(0, columns=(0, 3)), P(1, columns=(3, 3)), P(2, columns=(3, 9))), "without gaps"),
    ((P(0, columns=(0, 3)), P(1)), "without gaps"),
    ((P(0, columns=(0, 3.0)), P(1, columns=(3.0, 9))), "without gaps"),
])
def test_bad_pieces_are_named(pieces, text):
    with pytest.raises(ValueError, match=text) as err:
        ShardingPlan(4, {"user": pieces})
    assert "table 'user'" in str(err.value)


@pytest.mark.parametrize("obj, text", [
    ([], "exactly 'n_shards', 'tables'"),
    ({"n_shards": 2}, "exactly 'n_shards', 'tables'"),
    ({"n_shards": 2, "tables": {}, "more": 1}, "exactly"),
    ({"n_shards": 2, "tables": []}, "exactly"),
    ({"n_shards": "2", "tables": {}}, "n_shards >= 1"),
    ({"n_shards": 2, "tables": {"user": {"servers": [0], "columns": None}}}, "table 'user': pieces must be a list"),
    ({"n_shards": 2, "tables": {"user": [{"servers": [0]}]}}, "table 'user': pieces must be a list"),
    ({"n_shards": 2, "tables": {"user": [{"servers": 0, "columns": None}]}}, "table 'user': pieces must"),
    ({"n_shards": 2, "tables": {"user": [{"servers": [0], "columns": [0, 4, 9]}]}}, "table 'user': pieces must"),
    ({"n_shards": 2, "tables": {"user": [{"servers": [0], "columns": 4}]}}, "table 'user': pieces must"),
    ({"n_shards": 2, "tables": {"user": [{"servers": [0], "columns": None, "x": 1}]}}, "table 'user': pieces"),
    ({"n_shards": 2, "tables": {"user": [{"servers": ["0"], "columns": None}]}}, "table 'user': servers"),
    ({"n_shards": 2, "tables": {"user": [{"servers": [[0]], "columns": None}]}}, "table 'user': servers"),
    ({"n_shards": 2, "tables": {"user": [{"servers": [2], "columns": None}]}}, r"table 'user': servers \[2\]"),
    ({"n_shards": 2, "tables": {"user": [{"servers": [0], "columns": [0, 3]},
                                         {"servers": [1], "columns": ["3", 9]}]}}, "table 'user': column pieces"),
    ({"n_shards": 2, "tables": {"user": [{"servers": [0], "columns": [[0], 3]},
                                         {"servers": [1], "columns": [3, 9]}]}}, "table 'user': column pieces"),
])
def test_malformed_plan_files_are_a_value_error_naming_where(obj, text):
    with pytest.raises(ValueError, match=text) as err:
        ShardingPlan.from_json(obj, "ckpt/commit.json: plan")
    assert str(err.value).startswith("ckpt/commit.json: plan: ")


@pytest.mark.parametrize("kind", ["hash", "table", "subset", "columns", "columns2"])
def test_a_plan_survives_json(kind):
    p = plan(kind)
    again = ShardingPlan.from_json(json.loads(json.dumps(p.to_json())))
    assert again == p and again.to_json() == p.to_json()
    assert again.is_hash() == (kind == "hash")


def test_a_plan_naming_every_server_in_order_is_the_hash_plan():
    assert ShardingPlan(3, {"user": (P(0, 1, 2),)}).is_hash()
    assert not ShardingPlan(3, {"user": (P(2, 1, 0),)}).is_hash()  # the same servers, another routing
    assert not ShardingPlan(3, {"user": (P(0, 1),)}).is_hash()


@pytest.mark.parametrize("pieces, dim", [((P(0, columns=(0, 3)), P(1, columns=(3, 8))), 8),
                                         ((P(0, columns=(0, 3)), P(1, columns=(3, 10))), 10)])
def test_a_store_refuses_a_table_wider_or_narrower_than_its_pieces(pieces, dim):
    with pytest.raises(ValueError, match=rf"table 'user' is 9 columns wide, its pieces cover \[0, {dim}\)"):
        ShardingPlan(2, {"user": pieces}).shard_config(config(), 0)
    with pytest.raises(ValueError, match="9 columns wide"):  # through the store, on a shard holding no piece too
        ShardStore(config(), 1, 3, plan=ShardingPlan(3, {"user": pieces}))


def test_a_plan_placing_an_unknown_table_is_refused():
    with pytest.raises(ValueError, match=r"places table 'nope', which is not one of \['item', 'user'\]"):
        ShardStore(config(), 0, 2, plan=ShardingPlan(2, {"nope": (P(0),)}))


def test_clustered_and_chunked_tables_stay_row_wise_over_every_server():
    from cardinal.embedding.table_config import SaecSpec
    saec = config(saec={"user": SaecSpec(2.0, 5)})
    with pytest.raises(ValueError, match=r"table 'user' is clustered .* leave it out of the plan"):
        ShardingPlan(2, {"user": (P(1),)}).shard_config(saec, 0)
    ShardingPlan(2, {"item": (P(1),)}).shard_config(saec, 0)  # another table may move
    chunked = StoreConfig((TableConfig("user", 8, chunks=2),), OPTIMIZERS["adagrad"])
    with pytest.raises(ValueError, match=r"table 'user' has chunked rows .* cannot be split by columns"):
        ShardingPlan(2, {"user": (P(0, columns=(0, 4)), P(1, columns=(4, 8)))}).shard_config(chunked, 0)
    ShardingPlan(2, {"user": (P(1),)}).shard_config(chunked, 1)  # whole rows: table-wise is fine


def test_a_plan_for_another_shard_count_is_refused():
    with pytest.raises(ValueError, match="plan is for 3 shards, this store is one of 2"):
        ShardStore(config(), 0, 2, plan=ShardingPlan(3))
    with pytest.raises(ValueError, match="plan is for 3 shards, the transport has 2"):
        PSClient(connect(config(), 2).transport, plan=ShardingPlan(3))


def test_each_shard_holds_its_pieces_as_tables_of_their_own_width():
    p = plan("columns")
    held = {s: {t.name: (t.dim, t.first_column) for t in p.shard_config(config(), s).tables} for s in range(4)}
    assert held == {0: {"user-cols0-3": (3, 0), "item-cols1-4": (3, 1)},
                    1: {"user-cols3-9": (6, 3), "item-cols1-4": (3, 1)},
                    2: {"item-cols1-4": (3, 1)},
                    3: {"user-cols3-9": (6, 3), "item-cols0-1": (1, 0), "item-cols1-4": (3, 1)}}
    adm = config(admission={"user": AdmissionConfig(policy="count", threshold=2)})
    assert set(p.shard_config(adm, 1).admission) == {"user-cols3-9"}
    assert p.names(["user", "item"], 3) == ["user-cols3-9", "item-cols0-1", "item-cols1-4"]


# --- 2. a column piece starts as those columns of the whole row -----------------------------------

M64 = (1 << 64) - 1


def _py_hash(key: int) -> int:
    z = (key + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _py_uniform(bits24: int, scale: float) -> np.float32:
    u = np.float32(bits24 * (1.0 / 16777216.0))
    return (np.float32(2.0) * u - np.float32(1.0)) * np.float32(scale)


def slow_row(id_: int, width: int, seed: int, scale: float) -> np.ndarray:
    """The whole row of ``id_``, value by value: value 2k from the high bits of hash k, 2k + 1 the low."""
    base = _py_hash(id_ & M64) ^ _py_hash(seed & M64)
    out = np.zeros(width, np.float32)
    for v in range(width):
        bits = _py_hash((base + (v // 2) * 0xD1B54A32D192ED03) & M64)
        out[v] = _py_uniform(bits >> 40 if v % 2 == 0 else (bits >> 8) & 0xFFFFFF, scale)
    return out


def test_init_rows_of_a_column_piece_are_those_columns_of_the_whole_row():
    ids = np.array([0, -1, 7, 2**63 - 1, -2**63, 123456789], np.int64)
    seed, scale, width = 11, 0.3, 13
    whole = np.stack([slow_row(int(i), width, seed, scale) for i in ids])
    full = np.zeros((len(ids), width + 2), np.float32)
    init_rows(ids, full, 0, len(ids), width, np.int64(seed), np.float32(scale))
    assert full[:, :width].tobytes() == whole.tobytes() and not full[:, width:].any()
    for first in range(width):
        for dim in range(1, width - first + 1):
            piece = np.full((len(ids), dim + 2), 7, np.float32)  # two words of state, left untouched
            init_rows(ids, piece, 0, len(ids), dim, np.int64(seed), np.float32(scale), first)
            assert piece[:, :dim].tobytes() == whole[:, first:first + dim].tobytes(), (first, dim)
            assert (piece[:, dim:] == 7).all()


def test_a_table_with_a_first_column_starts_as_the_wider_tables_columns():
    ids = np.arange(-50, 50, dtype=np.int64)
    wide = EmbeddingTable(TableConfig("t", 9, seed=3), make_optimizer({"name": "sgd"})).pull(ids)
    for lo, hi in ((0, 3), (3, 9), (5, 6), (1, 8)):
        piece = EmbeddingTable(TableConfig("t", hi - lo, seed=3, first_column=lo), make_optimizer({"name": "sgd"}))
        assert piece.pull(ids).tobytes() == wide[:, lo:hi].tobytes()
        assert piece.pull(ids, create=False).tobytes() == wide[:, lo:hi].tobytes()


# --- 3. routing ---------------------------------------------------------------------------------

def test_each_piece_routes_to_its_own_servers():
    ids = np.random.default_rng(0).integers(-2**63, 2**63 - 1, 20_000, dtype=np.int64)
    assert np.array_equal(ShardingPlan(4).route("user", ids), route(ids, 4))
    assert np.array_equal(ShardingPlan(4, {"user": (P(0, 1, 2, 3),)}).route("user", ids), route(ids, 4))
    table = plan("table")
    assert (table.route("user", ids) == 3).all() and (table.route("item", ids) == 0).all()
    subset = ShardingPlan(5, {"user": (P(3, 1),)})
    got = subset.route("user", ids)
    assert set(np.unique(got)) == {1, 3} and abs((got == 1).mean() - 0.5) < 0.02
    assert np.array_equal(got, np.array([3, 1])[route(ids, 2)])  # servers[hash % len], in the plan's order
    cols = plan("columns")
    assert (cols.route("user-cols0-3", ids) == 0).all()
    assert set(np.unique(cols.route("user-cols3-9", ids))) == {1, 3}
    assert np.array_equal(cols.route("item-cols1-4", ids), route(ids, 4))
    with pytest.raises(ValueError, match=r"table 'user' is split by columns into \['user-cols0-3', 'user-cols3-9'\]"):
        cols.route("user", ids)
    assert cols.locate("user-cols3-9") == ("user", P(1, 3, columns=(3, 9)))
    assert cols.locate("other") == ("other", P(0, 1, 2, 3))


def test_a_store_refuses_ids_another_shard_holds_by_the_plan_and_changes_nothing():
    p = plan("subset", 4)  # user over (3, 1)
    s = ShardStore(config(), 3, 4, plan=p)
    ids = np.arange(-100, 100, dtype=np.int64)
    mine, other = ids[p.route("user", ids) == 3], ids[p.route("user", ids) == 1]
    assert len(mine) and len(other) and not np.isin(route(other, 4), [1]).all()
    s.pull("user", mine, step=1)
    s.push("user", mine, np.ones((len(mine), 9), np.float32), step=1)
    before = s.stats(digest=True)["tables"]["user"]["digest_parts"], s.pull("user", mine, create=False)
    mixed = np.concatenate([mine[:5], other[:1]])
    with pytest.raises(ValueError, match=rf"id {other[0]} of table 'user' belongs to another shard than 3 of 4 by the"):
        s.pull("user", mixed, step=2)
    with pytest.raises(ValueError, match="belongs to another shard"):
        s.push("user", mixed, np.ones((len(mixed), 9), np.float32), step=2)
    after = s.stats(digest=True)["tables"]["user"]["digest_parts"], s.pull("user", mine, create=False)
    assert after[0] == before[0] and after[1].tobytes() == before[1].tobytes()
    s.check()
    with pytest.raises(ValueError, match="unknown table 'item'"):  # item lives on (0, 3)... not 2
        ShardStore(config(), 2, 4, plan=p).pull("item", mine, step=1)
    cols = ShardStore(config(), 0, 4, plan=plan("columns"))
    with pytest.raises(ValueError, match="unknown table 'user'"):  # the logical name: not a table it holds
        cols.pull("user", mine, step=1)


# --- 4. the same model in any plan ------------------------------------------------------------------

PLANS = ["hash", "table", "subset", "columns", "columns2"]


@pytest.mark.parametrize("opt", ["adagrad", "adam", "sgd"])
def test_an_element_wise_optimizer_trains_the_same_model_in_every_plan(opt):
    runs = {k: train(connect(config(opt), 4, plan=plan(k))) for k in PLANS}
    runs["hash3"] = train(connect(config(opt), 3))
    for k, got in runs.items():
        assert len(got) == len(runs["hash"])
        for step, (a, b) in enumerate(zip(runs["hash"], got)):
            assert a.tobytes() == b.tobytes(), (k, step)


def test_rowwise_adagrad_keeps_one_accumulator_a_piece_so_column_plans_differ():
    runs = {k: train(connect(config("rowwise_adagrad"), 4, plan=plan(k)), steps=[1]) for k in PLANS}
    for k in ("table", "subset"):
        assert all(a.tobytes() == b.tobytes() for a, b in zip(runs["hash"], runs[k]))
    for k in ("columns", "columns2"):
        assert runs["hash"][0].tobytes() == runs[k][0].tobytes()  # first pull: the same initial rows
        assert runs["hash"][1].tobytes() != runs[k][1].tobytes()  # after a push: per-piece accumulators


def test_a_column_plan_sends_each_piece_its_columns_and_counts_bytes_once():
    client = connect(config("sgd"), 4, plan=plan("columns"))
    ids = np.array([5, -3, 5, 99], np.int64)
    rows = client.pull("user", ids, step=1).wait()
    assert rows.shape == (4, 9)
    by_piece = {n: st.pull(n, ids[st.plan.route(n, ids) == st.shard], create=False)
                for st in stores(client) for n in st.tables if n.startswith("user")}
    assert {n: r.shape[1] for n, r in by_piece.items()} == {"user-cols0-3": 3, "user-cols3-9": 6}
    assert client.metrics()["pull_row_bytes"] == 4 * 9 * 4
    with pytest.raises(ValueError, match="table 'user' is 9 columns wide by the sharding plan, the gradients 8"):
        client.push("user", ids, np.ones((4, 8), np.float32), step=1)
    empty = client.pull("user", np.zeros(0, np.int64), step=1).wait()
    assert empty.shape == (0, 9)
    client.push("user", np.zeros(0, np.int64), np.zeros((0, 9), np.float32), step=1).wait()


def test_a_client_with_another_plan_than_its_stores_is_caught_on_the_first_pull():
    """Its pieces have other names than the stores': the first pull names the one they lack."""
    good = connect(config(), 2, plan=ShardingPlan(2, {"user": (P(0, columns=(0, 4)), P(1, columns=(4, 9)))}))
    liar = PSClient(good.transport, plan=ShardingPlan(2, {"user": (P(0, columns=(0, 5)), P(1, columns=(5, 9)))}))
    with pytest.raises(ValueError, match="unknown table 'user-cols0-5'"):
        liar.pull("user", IDS, step=1).wait()


def test_digest_of_a_table_is_that_of_its_pieces():
    a, b = connect(config(), 4, plan=plan("table")), connect(config(), 3)
    train(a, steps=[1])
    train(b, steps=[1])
    assert a.digest("user") == b.digest("user") and a.digest("item") == b.digest("item")
    c = connect(config(), 4, plan=plan("columns"))
    train(c, steps=[1])
    assert c.digest("user") != a.digest("user")  # pieces of rows digest otherwise
    with pytest.raises(ValueError, match="unknown table 'nope'"):
        c.digest("nope")


# --- 5. checkpoints across plans ------------------------------------------------------------------

PAIRS = [("hash", 4, "table", 4), ("table", 4, "columns", 4), ("columns", 4, "columns2", 4),
         ("columns", 4, "hash", 3), ("columns2", 4, "subset", 2), ("subset", 3, "columns", 4),
         ("hash", 4, "subset", 4), ("columns", 4, "columns", 3)]  # the last two: same columns, other servers


@pytest.mark.parametrize("opt", ["adagrad", "adam"])
@pytest.mark.parametrize("a, na, b, nb", PAIRS)
def test_a_checkpoint_loads_into_any_plan_with_its_rows_and_state(tmp_path, opt, a, na, b, nb):
    src = connect(config(opt), na, plan=plan(a, na))
    train(src)
    before = lookup(src)
    path = src.save(tmp_path, 3)
    dst = connect(config(opt), nb, plan=plan(b, nb))
    info = dst.load(path)
    assert info["rows"] == {t: int((before[t] != 0).any(axis=1).sum()) for t in DIMS}
    assert_same(lookup(dst), before)
    for s in stores(dst):
        s.check()
    train(src, steps=[4, 5], seed=9)  # the optimizer state came along: the next steps agree too
    train(dst, steps=[4, 5], seed=9)
    assert_same(lookup(dst), lookup(src))


def _by_id(stores_, name):
    out = {}
    for s in stores_:
        if name in s.tables:
            e = s.tables[name].export()
            out |= {int(i): (d, c, t) for i, d, c, t in zip(e["ids"], e["data"], e["count"], e["last_step"])}
    return out


def slow_join(saved: dict, saved_plan: ShardingPlan, table: str, lo: int, hi: int, state: int):
    """id -> (row, count, last_step) of columns [lo, hi) from the saved pieces, per row: values and
    per-column state from the piece holding the column, the per-row words the mean of the pieces'
    weighted by the columns each gives (in float64, then rounded once)."""
    w, over = hi - lo, []
    for p in saved_plan.pieces(table):
        plo, phi = p.columns or (0, DIMS[table])
        if plo < hi and phi > lo:
            over.append((plo, phi, saved[p.name(table)]))
    out = {}
    for i in set.intersection(*(set(rows) for *_, rows in over)):
        values, words = np.zeros(w, np.float32), np.zeros(state, np.float64)
        count = last = 0
        for plo, phi, rows in over:
            d, c, t = rows[i]
            a, b = max(lo, plo), min(hi, phi)
            values[a - lo:b - lo] = d[a - plo:b - plo]
            words += d[phi - plo:].astype(np.float64) * (b - a)
            count, last = max(count, int(c)), max(last, int(t))
        out[i] = (np.concatenate([values, (words / w).astype(np.float32)]), count, last)
    return out


@pytest.mark.parametrize("a, b", [("columns", "hash"), ("columns", "columns2"), ("columns2", "columns"),
                                  ("hash", "columns")])
def test_rowwise_adagrad_joins_per_piece_accumulators_as_their_width_weighted_mean(tmp_path, a, b):
    src = connect(config("rowwise_adagrad"), 4, plan=plan(a))
    train(src, steps=[1, 2])
    first = plan(a).pieces("user")[0]  # one piece sees more (a request that reached it alone): counts differ
    name = first.name("user")
    seen = np.array(sorted(i for i in _by_id(stores(src), name) if i < 0), np.int64)  # rows every piece holds
    for s in stores(src):
        if name in s.tables:
            s.pull(name, seen[s.plan.route(name, seen) == s.shard], step=5)
    saved = {n: _by_id(stores(src), n) for n in plan(a).names(DIMS)}
    dst = connect(config("rowwise_adagrad"), 4, plan=plan(b))
    dst.load(src.save(tmp_path, 2))
    for t in DIMS:
        for p in plan(b).pieces(t):
            lo, hi = p.columns or (0, DIMS[t])
            want, got = slow_join(saved, plan(a), t, lo, hi, 1), _by_id(stores(dst), p.name(t))
            assert sorted(want) == sorted(got) and len(got) > 100
            for i, (d, c, last) in want.items():
                assert got[i][0].tobytes() == d.tobytes() and (got[i][1], got[i][2]) == (c, last), (t, p, i)
    assert_same(lookup(dst), lookup(src))
    if a != "hash":
        assert max(c for _, c, _ in _by_id(stores(dst), plan(b).names(["user"])[-1]).values()) > 3


def test_a_row_one_piece_lacks_is_not_joined_and_starts_afresh(tmp_path):
    src = connect(config("adagrad"), 4, plan=plan("columns"))
    train(src, steps=[1])
    lone = np.array([500, 501, -777], np.int64)  # a request that reached one piece only (its other server failed)
    stores(src)[0].pull("user-cols0-3", lone, step=1)
    dst = connect(config("adagrad"), 3, plan=plan("columns2", 3))
    dst.load(src.save(tmp_path, 1))
    assert not dst.pull("user", lone, create=False).wait().any()
    assert_same(lookup(dst), lookup(src))
    fresh = connect(config("adagrad"), 1).pull("user", lone, step=2).wait()
    assert dst.pull("user", lone, step=2).wait().tobytes() == fresh.tobytes()


@pytest.mark.parametrize("kind", ["columns", "columns2"])
def test_adam_step_counts_rejoin_exactly(tmp_path, kind):
    """Equal per-row words of the pieces join to that word, bitwise, however the widths divide
    (a float32 sum of t * (3 / 9) + t * (6 / 9) is 7.0000005 for t = 7), and the next push agrees."""
    src = connect(config("adam"), 4, plan=plan(kind))
    ids = np.arange(60, dtype=np.int64)
    src.push("user", ids, np.ones((60, 9), np.float32), step=1, counts=np.arange(1, 61, dtype=np.int32)).wait()
    dst = connect(config("adam"), 2)
    dst.load(src.save(tmp_path, 1))
    steps = {i: d[-1] for i, (d, _, _) in _by_id(stores(dst), "user").items()}
    assert steps == {i: np.float32(i + 1) for i in range(60)}
    grads = np.random.default_rng(0).standard_normal((60, 9)).astype(np.float32)
    for c in (src, dst):
        c.push("user", ids, grads, step=2).wait()
    assert src.pull("user", ids, create=False).wait().tobytes() == dst.pull("user", ids, create=False).wait().tobytes()


@pytest.mark.parametrize("middle, n", [("subset", 3), ("columns2", 4)])
def test_a_delta_across_plan_changes_loads_back_every_row_and_deletion(tmp_path, middle, n):
    a = connect(config("adagrad"), 4, plan=plan("columns"))
    train(a, steps=[1, 2])
    a.save(tmp_path, 2)
    b = connect(config("adagrad"), n, plan=plan(middle, n))  # the delta's stores load the full one...
    b.load(tmp_path)
    train(b, steps=[3], seed=11, n=40)  # ...change a few rows, make new ones...
    gone = np.array([-100, -7, 0, 42], np.int64)
    for s in stores(b):  # ...and lose some (an eviction, on every piece)
        for name, t in s.tables.items():
            t.delete(gone[s.plan.route(name, gone) == s.shard])
    delta = b.save(tmp_path, 3, base=2, keep=2)
    assert json.loads((delta / "commit.json").read_text())["base"] == 2
    want = lookup(b)
    assert not want["user"][np.isin(IDS, gone)].any()
    for kind, k in (("columns2", 4), ("hash", 2), ("columns", 3)):
        c = connect(config("adagrad"), k, plan=plan(kind, k))
        c.load(delta)
        assert_same(lookup(c), want)
    train(c, steps=[4], seed=3)  # the state came along the chain too
    train(b, steps=[4], seed=3)
    assert_same(lookup(c), lookup(b))


@pytest.mark.parametrize("a, b", [("columns", "hash"), ("hash", "columns2"), ("table", "columns"),
                                  ("columns2", "subset")])
def test_admission_counters_carry_across_a_plan_change(tmp_path, a, b):
    adm = {t: AdmissionConfig(policy="count", threshold=3) for t in DIMS}
    src = connect(config("sgd", adm), 4, plan=plan(a))
    twice, once = np.arange(-60, 0, dtype=np.int64), np.arange(0, 60, dtype=np.int64)
    for step in (1, 2):
        for t in DIMS:
            src.pull(t, twice if step == 2 else np.concatenate([twice, once]), step=step).wait()
    path = src.save(tmp_path, 2)
    dst = connect(config("sgd", adm), 3, plan=plan(b, 3))
    dst.load(path)
    everyone = np.concatenate([twice, once])
    for t in DIMS:
        want = src.pull(t, everyone, step=3).wait()
        got = dst.pull(t, everyone, step=3).wait()
        assert want[:60].any(axis=1).all() and not want[60:].any()  # the third sighting admits
        assert got.tobytes() == want.tobytes(), t


def test_a_commit_records_the_plan_unless_it_is_the_hash_plan(tmp_path):
    for k, kind in enumerate(["hash", "columns", "table"]):
        c = connect(config(), 4, plan=plan(kind))
        train(c, steps=[1])
        marker = json.loads((c.save(tmp_path / kind, 1) / "commit.json").read_text())
        assert marker.get("plan") == (None if kind == "hash" else plan(kind).to_json())
    explicit = connect(config(), 2, plan=ShardingPlan(2, {"user": (P(0, 1),)}))
    assert "plan" not in json.loads((explicit.save(tmp_path / "x", 1) / "commit.json").read_text())


def test_rows_of_another_format_load_only_into_their_saved_columns(tmp_path):
    fp16 = StoreConfig((TableConfig("user", 9, seed=1, storage="fp16"), TableConfig("item", 4, seed=2)),
                       OPTIMIZERS["adagrad"])
    src = connect(fp16, 2)
    train(src, steps=[1])
    path = src.save(tmp_path, 1)
    table = connect(fp16, 3, plan=plan("table", 3))  # whole rows: any servers
    table.load(path)
    assert_same(lookup(table), lookup(src))
    cols = connect(fp16, 4, plan=plan("columns"))
    train(cols, steps=[1], seed=3)
    before = lookup(cols)
    with pytest.raises(ValueError, match=r"table 'user' was saved split into other columns .* only from fp32 rows "
                                         r"without chunks \(it stores fp16\)"):
        cols.load(path)
    assert_same(lookup(cols), before)


def _edit_plan(path, edit, seal=True):
    marker = json.loads((path / "commit.json").read_text())
    edit(marker["plan"])
    marker.pop("crc32")
    write_json(path / "commit.json", {**marker, "crc32": crc32_json(marker)} if seal else {**marker, "crc32": 1})


def test_a_checkpoint_whose_plan_does_not_match_its_manifests_is_refused(tmp_path):
    src = connect(config(), 4, plan=plan("table"))
    train(src, steps=[1])
    before = lookup(src)
    path = src.save(tmp_path, 1)
    dst = connect(config(), 4, plan=plan("table"))
    dst.load(path)
    expect = lookup(dst)
    original = (path / "commit.json").read_bytes()

    def moved(p):  # user saved on shard 3; the plan says shard 2
        p["tables"]["user"] = [{"servers": [2], "columns": None}]
    _edit_plan(path, moved)
    with pytest.raises(ValueError, match=r"shard 2: holds tables \[\], its sharding plan puts \['user'\] there"):
        dst.load(path)
    assert_same(lookup(dst), expect)
    (path / "commit.json").write_bytes(original)
    _edit_plan(path, moved, seal=False)
    with pytest.raises(ValueError, match="its crc32 does not match its contents"):
        dst.load(path)
    (path / "commit.json").write_bytes(original)

    def other_n(p):
        p["n_shards"] = 5
    _edit_plan(path, other_n)
    with pytest.raises(ValueError, match="its plan is for 5 shards, its n_shards is 4"):
        dst.load(path)
    (path / "commit.json").write_bytes(original)

    def bad(p):
        p["tables"]["user"] = [{"servers": [9], "columns": None}]
    _edit_plan(path, bad)
    with pytest.raises(ValueError, match=r"commit.json: plan: table 'user': servers \[9\]"):
        dst.load(path)
    (path / "commit.json").write_bytes(original)
    dst.load(path)
    assert_same(lookup(dst), before)


def test_a_plan_edited_to_route_otherwise_is_caught_by_the_ids(tmp_path):
    src = connect(config(), 4, plan=plan("subset"))  # user over (3, 1)
    train(src, steps=[1])
    path = src.save(tmp_path, 1)

    def swapped(p):  # the same servers, in the other order: each holds the rows of the other
        p["tables"]["user"] = [{"servers": [1, 3], "columns": None}]
    _edit_plan(path, swapped)
    reseal(path)
    dst = connect(config(), 2)
    with pytest.raises(ValueError, match="do not route to shard"):
        dst.load(path)


def test_a_checkpoint_without_a_plan_refuses_piece_tables_in_its_manifests(tmp_path):
    src = connect(config(), 2, plan=ShardingPlan(2, {"user": (P(0, 1, columns=(0, 4)), P(0, 1, columns=(4, 9)))}))
    train(src, steps=[1])
    path = src.save(tmp_path, 1)
    marker = json.loads((path / "commit.json").read_text())
    del marker["plan"], marker["crc32"]
    write_json(path / "commit.json", {**marker, "crc32": crc32_json(marker)})
    dst = connect(config(), 2)
    with pytest.raises(ValueError, match=r"has tables \['item', 'user-cols0-4', 'user-cols4-9'\], the store has"):
        dst.load(path)


# --- 6. servers and clients of different plans ---------------------------------------------------

def test_check_plan_over_grpc_names_the_server_started_with_another_plan(tmp_path):
    """Servers are ``ShardServer``s of stores made with a plan (``cardinal server`` takes none yet)."""
    from cardinal.ps.server.process import ServerOptions, ShardServer
    served, servers, clients = plan("columns", 3), [], []
    try:
        for k in range(3):
            servers.append(ShardServer(ShardStore(config(), k, 3, plan=served), tmp_path, "job", "tok",
                                       ServerOptions()).start())
        addresses = [f"127.0.0.1:{s.port}" for s in servers]

        def client(p):
            c = connect(servers=addresses, job="job", token="tok", timeout=20, plan=p)
            clients.append(c)
            return c
        good = client(served)
        good.check_plan(list(DIMS))
        local = connect(config(), 2, plan=plan("table", 2))
        assert all(a.tobytes() == b.tobytes() for a, b in zip(train(good, steps=[1, 2]), train(local, steps=[1, 2])))
        user = served.tables["user"]
        others = [(plan("hash", 3), 0), (plan("columns2", 3), 0), (plan("table", 3), 0),
                  (ShardingPlan(3, {**served.tables, "user": (user[0], P(2, columns=(3, 9)))}), 1),
                  (ShardingPlan(3, {**served.tables, "user": (user[0], P(0, 1, 2, columns=(3, 9)))}), 0)]  # holds less
        for other, shard in others:
            with pytest.raises(ValueError, match=rf"server {shard} was started with another sharding plan \(it holds "
                                                 rf"tables .*, this worker's plan puts .* there\): start every "
                                                 rf"server and worker with the same recipe \(its tables follow "
                                                 rf"model.name, .* and train.baseline; where they live, plan.layout\)"):
                client(other).check_plan(list(DIMS))
        routed = ShardingPlan(3, {**served.tables, "user": (user[0], P(2, 1, columns=(3, 9)))})  # servers reordered
        with pytest.raises(ValueError, match=r"server 0 was started with another sharding plan \(the same tables, "
                                             r"their rows on other servers: .*the same plan.layout$"):
            client(routed).check_plan(list(DIMS))
    finally:
        for c in clients:
            c.transport.close()
        for s in servers:
            s.stop(0)


# --- 7. several workers' clocks ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["table", "columns"])
def test_clocks_count_a_tables_pieces_for_the_table(kind):
    client = connect(config("sgd"), 4, plan=plan(kind))
    ids = np.arange(-20, 20, dtype=np.int64)
    for step in (1, 2):
        for w in (0, 1):
            for t, d in DIMS.items():
                if step == 2 and w == 1 and t == "user":
                    continue  # worker 1 has not pushed user's step 2
                reply = client.push(t, ids[w::2], np.ones((20, d), np.float32), step=step,
                                    origin=Origin(w, 2, combine=True)).wait()
                assert set(reply) == {"clock"}
    clocks = client.clocks(2)
    assert set(clocks) == set(DIMS)
    assert clocks["item"][:2] == (2, 0)
    assert clocks["user"][:2] == (1, 1)  # waits for worker 1
    assert clocks["user"][2] in {s for p in plan(kind).pieces("user") for s in p.servers}
    held = [s for s in stores(client) if any(n.startswith("user") for n in s.tables)]
    assert held and all(s.steps.clock(n, 2) == 1 for s in held for n in s.tables if n.startswith("user"))


def test_a_push_with_an_origin_reaches_every_server_of_each_piece_only():
    client = connect(config("sgd"), 4, plan=plan("subset"))  # user over (3, 1)
    one = np.array([5], np.int64)
    client.push("user", one, np.ones((1, 9), np.float32), step=1, origin=Origin(0, 1)).wait()
    clocks = {s.shard: s.steps.clocks() for s in stores(client)}
    assert {s for s, c in clocks.items() if "user" in c} == {1, 3}
    client.push("user", one, np.ones((1, 9), np.float32), step=1, origin=Origin(1, 2)).wait()
    reply = client.push("user", one, np.ones((1, 9), np.float32), step=2, origin=Origin(0, 2),
                        since=[0, 0, 0, 0]).wait()  # worker 1's update of id 5, from the server that holds it
    assert set(reply["log"]) == {1, 3}
    holder = int(plan("subset").route("user", one)[0])
    assert reply["log"][holder]["ids"].tolist() == [5]
    assert reply["log"][4 - holder]["ids"].tolist() == []


# --- 8. the worker cache ------------------------------------------------------------------------

def test_the_hot_row_cache_refuses_a_table_split_by_columns_and_takes_a_table_wise_one():
    from cardinal.worker.sources import PSSource
    from cardinal.worker.sources.cache import CachedSource
    split = connect(config("sgd"), 4, plan=plan("columns"))
    with pytest.raises(ValueError, match=r"splits table 'user' by columns: place it row-wise or table-wise"):
        CachedSource(PSSource(split, 4, 20), {"user": 9}, 1 << 20, 100, OPTIMIZERS["sgd"])
    whole = connect(config("sgd"), 4, plan=plan("subset"))
    src = CachedSource(PSSource(whole, 4, 20), {"user": 9}, 1 << 20, 100, OPTIMIZERS["sgd"], admit_after=1)
    ids = np.array([3, 9, 3], np.int64)
    rows = src.pull("user", ids, create=True, step=1).wait()
    assert np.asarray(rows).tobytes() == connect(config("sgd"), 1).pull("user", ids, step=1).wait().tobytes()


# --- what a review found ---------------------------------------------------------------------------

def test_numpy_integers_become_plain_ints_that_a_checkpoint_can_record(tmp_path):
    p = ShardingPlan(np.int64(2), {"user": (P(*np.argsort([3, 1]), columns=(np.int64(0), np.int64(4))),
                                             P(np.int64(1), columns=(4, 9)))})
    assert json.loads(json.dumps(p.to_json())) == p.to_json()
    assert all(type(s) is int for pieces in p.tables.values() for piece in pieces for s in piece.servers)
    client = connect(config(), 2, plan=p)
    train(client, steps=[1])
    client.save(tmp_path, 1)  # a TypeError in the commit marker before


def test_a_store_with_a_memory_budget_refuses_column_pieces():
    from cardinal.ps import StoreLimits
    with pytest.raises(ValueError, match="each server would evict its own piece of a row"):
        ShardStore(config(), 0, 3, StoreLimits(memory_budget=1 << 30), plan=plan("columns", 3))
    ShardStore(config(), 0, 2, StoreLimits(memory_budget=1 << 30), plan=plan("table", 2))  # whole rows: fine


def test_a_piece_named_as_another_table_of_the_job_is_refused():
    clash = StoreConfig((TableConfig("x", 8), TableConfig("x-cols0-4", 4)), OPTIMIZERS["adagrad"])
    with pytest.raises(ValueError, match="the piece 'x-cols0-4' has the name of a table of the job"):
        ShardingPlan(1, {"x": (P(0, columns=(0, 4)), P(0, columns=(4, 8)))}).shard_config(clash, 0)
