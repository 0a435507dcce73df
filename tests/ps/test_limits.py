"""Row limits of a shard store, without sockets: rows per server and per request, refusal of
non-finite results, and exactly-once with a bounded window per client. Every refusal is
checked to change nothing: the digest, and every row read back through the public API."""

import re
import threading

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.embedding.table import NonFiniteUpdate
from cardinal.ps import ShardStore, StoreConfig, StoreFull, StoreLimits
from cardinal.ps.limits import store_limits
from cardinal.ps.server import request_log
from cardinal.ps.server.request_log import FirstAttemptFailed, RequestIdError, RequestLog

CONFIG = StoreConfig((TableConfig("user", 8, seed=1), TableConfig("item", 4, seed=2)), {"name": "adam", "lr": 0.01})
KNOWN = np.arange(-50, 50, dtype=np.int64)


def store_with_rows(limits: StoreLimits | None = None, optimizer: dict | None = None) -> ShardStore:
    config = CONFIG if optimizer is None else StoreConfig(CONFIG.tables, optimizer)
    store = ShardStore(config, limits=limits)
    store.pull("user", KNOWN, step=1)
    store.push("user", KNOWN, np.full((len(KNOWN), 8), 0.5, np.float32), step=1)
    store.pull("item", KNOWN[:10], step=1)
    return store


def snapshot(store: ShardStore) -> dict:
    """Everything a refusal must leave as it was: digests, row counts, and rows read back."""
    probe = np.concatenate([KNOWN, np.arange(1000, 1100, dtype=np.int64)])  # known ids and new ones
    return {"digest": {t: store.tables[t].digest() for t in store.tables},
            "rows": {t: len(store.tables[t]) for t in store.tables},
            "user": store.pull("user", probe, create=False).tobytes(),
            "item": store.pull("item", probe, create=False).tobytes()}


def refused(store, call, error, match):
    before = snapshot(store)
    with pytest.raises(error, match=match):
        call()
    assert snapshot(store) == before
    store.check()


NEW = np.arange(1000, 1060, dtype=np.int64)


def test_a_full_store_refuses_whole_requests_and_creates_nothing():
    store = store_with_rows(StoreLimits(max_rows=150))  # holds 110 rows
    mixed = np.concatenate([KNOWN[:5], NEW])  # 5 known (their sightings must not count), 60 new
    refused(store, lambda: store.pull("user", mixed, step=2), StoreFull, "store full.*ps.limits.max_rows = 150")
    refused(store, lambda: store.push("item", mixed, np.ones((len(mixed), 4), np.float32), step=2), StoreFull,
            "store full")
    store.pull("user", NEW[:40], step=2)  # up to the limit: fine
    assert sum(len(t) for t in store.tables.values()) == 150
    refused(store, lambda: store.pull("item", NEW[40:41]), StoreFull, "store full")


def test_rows_one_request_may_create_are_bounded():
    store = store_with_rows(StoreLimits(max_new_rows_per_request=100))
    many = np.arange(2000, 2101, dtype=np.int64)
    refused(store, lambda: store.pull("user", np.repeat(many, 2)), StoreFull, "create 101 rows.*= 100")
    store.pull("user", np.repeat(many[:100], 2))  # duplicates count once; 100 is allowed


@pytest.mark.parametrize("optimizer, grad", [
    ({"name": "sgd", "lr": 10.0}, 3e38),           # the value overflows
    ({"name": "rowwise_adagrad"}, 1e20),           # the accumulator overflows (g * g)
    ({"name": "adagrad"}, 1e20),
    ({"name": "adam"}, 3e38),                      # v overflows
    ({"name": "ftrl"}, 1e20),                      # n overflows
])
def test_a_push_that_would_make_a_row_non_finite_is_refused_whole(optimizer, grad):
    store = store_with_rows(StoreLimits(max_gradient=float("inf")), optimizer)  # the guard behind ps.limits.max_gradient
    ids = np.concatenate([KNOWN[:3], NEW[:2]])  # known rows and new ones: none updated, none created
    grads = np.zeros((len(ids), 8), np.float32)
    grads[1, 2] = grad
    refused(store, lambda: store.push("user", ids, grads, step=2, request_id="c0-1"), NonFiniteUpdate,
            f"id {int(ids[1])}.*NaN or Inf")
    store.push("user", ids, np.zeros_like(grads), step=2, request_id="c0-1")  # a refusal does not use up its id


def test_delta_pushes_that_overflow_are_refused():
    store = store_with_rows()
    ids = KNOWN[:4].copy()
    delta = np.full((4, 8), 3e38, np.float32)
    store.push("user", ids, delta, kind="delta", step=2)
    refused(store, lambda: store.push("user", ids, delta, kind="delta", step=3), NonFiniteUpdate, "delta push")
    twice = np.repeat(NEW[:1], 2)  # two finite deltas for one new id sum past float32
    refused(store, lambda: store.push("user", twice, np.full((2, 8), 3e38, np.float32), kind="delta"),
            NonFiniteUpdate, "NaN or Inf")


# --- exactly-once ----------------------------------------------------------------------------

def push(store, request_id, grads=1.0, ids=KNOWN[:4]):
    store.push("user", ids, np.full((len(ids), 8), grads, np.float32), step=2, request_id=request_id)


def test_a_resend_is_applied_once_and_one_with_another_payload_is_refused():
    store = store_with_rows()
    push(store, "c1-7")
    once = snapshot(store)
    push(store, "c1-7")
    assert snapshot(store) == once
    refused(store, lambda: push(store, "c1-7", grads=2.0), RequestIdError, "used before for another request")
    refused(store, lambda: store.push("user", KNOWN[:4], np.ones((4, 8), np.float32), step=3, request_id="c1-7"),
            RequestIdError, "another request")  # same arrays, another step


def test_an_id_below_the_window_is_refused_not_applied_twice():
    store = store_with_rows(StoreLimits(request_window=8))
    push(store, "c1-0")
    for seq in range(1, 20):
        push(store, f"c1-{seq}.0")
        push(store, f"c1-{seq}.1")
    assert len(store.requests) == 8  # bounded: the window, not the history
    refused(store, lambda: push(store, "c1-0"), RequestIdError, "older than this server remembers")
    push(store, "c2-0")  # another client has a window of its own


def test_parts_of_one_request_are_remembered_apart():
    store = store_with_rows()
    push(store, "c1-3.0", ids=KNOWN[:2])
    before = snapshot(store)
    push(store, "c1-3.1", ids=KNOWN[2:4])
    assert snapshot(store) != before


@pytest.mark.parametrize("request_id", ["", "c1", "c1-", "c1--3", "c 1-3", "c1-3.", "c1-3.12345", "é-1",
                                        "c" * 65 + "-1", "c1-" + "9" * 19, "x" * 65536])
def test_malformed_request_ids_are_refused(request_id):
    store = store_with_rows()
    refused(store, lambda: push(store, request_id), RequestIdError, "CLIENT-SEQ")


def test_clients_are_bounded_and_idle_ones_forgotten():
    now = [0.0]
    log = RequestLog(StoreLimits(max_clients=2, client_idle_s=60), clock=lambda: now[0])
    applied = []
    log.run("a-1", 0, lambda: applied.append("a"), lambda: None)
    now[0] = 30
    log.run("b-1", 0, lambda: applied.append("b"), lambda: None)
    log.run("c-1", 0, lambda: applied.append("c"), lambda: None)  # full: a, the least recently heard, is forgotten
    with pytest.raises(RequestIdError, match="client 'a' was forgotten"):
        log.run("a-1", 0, lambda: applied.append("a again"), lambda: None)  # it may have been applied: refused
    log.run("b-1", 0, lambda: applied.append("b again"), lambda: None)  # b is remembered: not applied twice
    now[0] = 100  # a forgotten 70 s ago, silent past any resend: its tombstone goes too
    log.run("a-1", 0, lambda: applied.append("a, a new client"), lambda: None)
    assert applied == ["a", "b", "c", "a, a new client"]


def test_a_flood_of_client_names_cannot_shut_out_a_restarted_worker():
    now = [0.0]
    log = RequestLog(StoreLimits(max_clients=64, client_idle_s=600), clock=lambda: now[0])
    applied = []
    for seq in range(request_log.ESTABLISHED):  # a worker that has trained a while
        log.run(f"worker-{seq}", seq, lambda: applied.append("worker"), lambda: None)
    for k in range(2 * 64):  # then made-up names, one request each, interleaved with the worker's steps
        now[0] += 0.01
        log.run(f"flood{k}-1", 0, lambda: None, lambda: None)
        log.run(f"worker-{request_log.ESTABLISHED + k}", 0, lambda: applied.append("worker"), lambda: None)
    log.run("restarted-0", 0, lambda: applied.append("restarted"), lambda: None)  # not refused
    assert applied.count("worker") == request_log.ESTABLISHED + 2 * 64 and applied[-1] == "restarted"
    with pytest.raises(RequestIdError, match="forgotten"):  # a forgotten name's resend: never applied twice
        log.run("flood0-1", 0, lambda: applied.append("twice"), lambda: None)
    assert "twice" not in applied


def test_a_client_with_a_request_in_flight_is_never_forgotten():
    log = RequestLog(StoreLimits(max_clients=1))
    started, finish = threading.Event(), threading.Event()
    slow = threading.Thread(target=log.run, args=("busy-1", 0, lambda: (started.set(), finish.wait(10)),
                                                  lambda: None))
    slow.start()
    try:
        assert started.wait(10)
        with pytest.raises(StoreFull, match="request in flight"):
            log.run("new-1", 0, lambda: None, lambda: None)
    finally:
        finish.set()
        slow.join(10)
    log.run("new-1", 0, lambda: None, lambda: None)  # done now: busy makes room


def test_a_flood_past_the_tombstones_is_refused_not_applied_twice():
    log = RequestLog(StoreLimits(max_clients=2, client_idle_s=600))
    for k in range(2 + 2 * request_log.TOMBSTONES):
        log.run(f"f{k}-1", 0, lambda: None, lambda: None)
    with pytest.raises(StoreFull, match="flood of client names"):
        log.run("onemore-1", 0, lambda: None, lambda: None)


def test_the_request_just_below_the_window_is_refused_not_applied_twice():
    store = store_with_rows(StoreLimits(request_window=4))
    for seq in range(5):  # keys 0..4 with a window of 4: key 0 has just left it
        push(store, f"c1-{seq}")
    once = snapshot(store)
    refused(store, lambda: push(store, "c1-0"), RequestIdError, "older than this server remembers")
    push(store, "c1-1")  # the oldest key in the window: acknowledged, not applied again
    assert snapshot(store) == once


def test_a_duplicate_of_a_failed_first_attempt_is_told_to_send_again():
    log = RequestLog()

    def fail():
        raise StoreFull("full")
    with pytest.raises(StoreFull):
        log.run("a-1", 5, fail, lambda: None)
    assert log.run("a-1", 5, lambda: "applied", lambda: "replayed") == "applied"  # the failure used nothing up
    assert log.run("a-1", 5, lambda: "applied", lambda: "replayed") == "replayed"
    assert FirstAttemptFailed.__mro__[1] is RuntimeError


def test_a_refused_push_spanning_many_blocks_restores_every_block():
    store = ShardStore(CONFIG, limits=StoreLimits(max_gradient=float("inf")))
    ids = np.arange(30_000, dtype=np.int64)  # adam, dim 8: about 5,000 rows per block
    store.pull("user", ids, step=1)
    before = snapshot(store), store.pull("user", ids, create=False).tobytes()
    grads = np.full((len(ids), 8), 0.1, np.float32)
    grads[-1, 0] = 3e38  # the last block's last row
    with pytest.raises(NonFiniteUpdate, match=f"id {len(ids) - 1}"):
        store.push("user", ids, grads, step=2)
    assert (snapshot(store), store.pull("user", ids, create=False).tobytes()) == before
    store.check()


def test_recipe_limits_are_validated_and_reach_the_store():
    from cardinal.recipe import load

    ps = load(None, ["ps.limits.max_rows=500", "ps.limits.max_new_rows_per_request=7", "ps.limits.request_window=9",
                     "ps.limits.max_clients=3", "ps.limits.client_idle_s=5.5", "ps.limits.max_gradient=1e4"]).ps
    assert store_limits(ps) == StoreLimits(500, 7, 9, 3, 5.5, max_gradient=1e4)
    for bad in ["max_rows=0", "max_rows=true", "max_message_mb=0", "max_message_mb=4096", "max_concurrent_calls=0",
                "request_window=1.5", "client_idle_s=0", "max_gradient=0.5", "max_gradient=nan", "max_gradient=true"]:
        with pytest.raises(ValueError, match=f"ps.limits.{bad.split('=')[0]}"):
            load(None, [f"ps.limits.{bad}"])


@pytest.mark.parametrize("field, value, says", [
    ("max_rows", 1.5, "ps.limits.max_rows must be an integer, got float 1.5"),
    ("memory_budget", 1e9, "ps.memory.budget must be an integer, got float 1000000000.0"),
    ("request_window", True, "ps.limits.request_window must be an integer, got bool True"),
    ("max_clients", "8", "ps.limits.max_clients must be an integer, got str '8'"),
    ("client_idle_s", False, "ps.limits.client_idle_s must be a number, got bool False"),
    ("max_gradient", float("nan"), "ps.limits.max_gradient must be >= 1, got nan"),
    ("max_rows", 0, "ps.limits.max_rows must be >= 1, got 0"),
])
def test_store_limits_take_integers_where_they_count_and_refuse_bools(field, value, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        StoreLimits(**{field: value})
    assert StoreLimits(client_idle_s=0.5 + 1, max_gradient=10).client_idle_s == 1.5  # seconds and bounds: any number


def test_empty_pulls_and_pushes_work_in_process():
    from cardinal.ps import connect

    client = connect(CONFIG, 2, concurrent=True)
    empty = np.zeros(0, np.int64)
    assert client.pull("user", empty).wait().shape == (0, 8)
    client.push("user", empty, np.zeros((0, 8), np.float32)).wait()
    client.push("user", empty, np.zeros((0, 8), np.float32), kind="delta").wait()
    assert sum(s["tables"]["user"]["rows"] for s in client.stats()) == 0
