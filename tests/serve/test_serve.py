"""Export and serving, in this process: the export predicts what `cardinal eval` predicts; its
tables, request parsing, reloads from training and the HTTP app (aiohttp's test server on
127.0.0.1) behave as documented."""

import asyncio
import json
import threading

import numpy as np
import pytest
import torch
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from cardinal import cli
from cardinal.checkpoint import layout
from cardinal.compression.clustered import ClusteredTable
from cardinal.data import CriteoReader
from cardinal.serve.export import export_run
from cardinal.serve.follow import Follower
from cardinal.serve.guard import ServeLimits
from cardinal.serve.http import PredictionServer
from cardinal.serve.merge import merge
from cardinal.serve.model import ServingModel
from cardinal.serve.requests import BadRequest, parse_request
from cardinal.serve.tables import SnapshotTable
from cardinal.train import Trainer
from helpers.recipes import tiny_recipe
from helpers.serving import eval_probabilities

# 12 steps; a checkpoint every 4 (4 full, 8 and 12 deltas on it), one evaluation at the end
FLAGS = ("ps.shards=2", "checkpoint.every=4", "checkpoint.full_every=3",
         "checkpoint.keep=5", 'eval.early_stop="none"', "sparse_optimizer.lr=0.3")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    recipe = tiny_recipe(tmp, *FLAGS)
    trainer = Trainer(recipe, tmp / "run", progress=False)
    trainer.fit()
    trainer.close()
    return tmp / "run", recipe


def predict_all(model, batches):
    return np.concatenate([model.predict(b) for b in batches])


@pytest.mark.slow
def test_export_predicts_what_eval_predicts(run, tmp_path, capsys):
    run_dir, recipe = run
    assert cli.main(["export", str(run_dir), "--out", str(tmp_path / "x")]) == 0
    assert "cardinal serve" in capsys.readouterr().out
    model = ServingModel.load(tmp_path / "x")
    expected, batches = eval_probabilities(recipe, model.manifest["checkpoint"], tmp_path)
    got = predict_all(model, batches)
    assert np.abs(got - expected).max() <= 1e-5
    assert model.unknown > 0 and model.lookups > model.unknown  # eval holds ids training never saw: zeros


@pytest.mark.slow
def test_export_holds_the_live_rows_and_no_training_state(run, tmp_path):
    run_dir, recipe = run
    m = export_run(run_dir, tmp_path / "x")
    assert sorted(m["files"]) == ["model.onnx", "tables/emb.ids.npy", "tables/emb.values.npy"]  # no lr_, no state
    assert sorted(p.name for p in (tmp_path / "x").rglob("*") if p.is_file()) == \
        ["emb.ids.npy", "emb.values.npy", "manifest.json", "model.onnx"]
    trainer = Trainer(recipe, tmp_path / "t", progress=False)
    trainer.load(m["checkpoint"])
    stats = trainer.client.stats()
    trainer.close()
    assert m["tables"]["emb"]["rows"] == sum(s["tables"]["emb"]["rows"] for s in stats) > 0
    assert m["step"] == 12 and m["checkpoint"].endswith("step-0000000012")


@pytest.mark.slow
@pytest.mark.parametrize("file", ["tables/emb.values.npy", "tables/emb.ids.npy", "model.onnx"])
def test_a_changed_export_file_is_refused(run, tmp_path, file):
    export_run(run[0], tmp_path / "x")
    path = tmp_path / "x" / file
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=path.name):
        ServingModel.load(tmp_path / "x")


@pytest.mark.slow
def test_export_refuses_a_used_directory_and_a_bad_form_writing_nothing(run, tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an empty directory"):
        export_run(run[0], tmp_path / "used")
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["keep.txt"]
    assert cli.main(["export", str(run[0]), "--out", str(tmp_path / "y"), "--tables", "int4"]) == 2
    for ratio in ("0.5", "inf", "nan"):
        assert cli.main(["export", str(run[0]), "--out", str(tmp_path / "y"), "--tables", "saec", "--ratio", ratio]) == 2
    assert not (tmp_path / "y").exists()
    (tmp_path / "afile").write_text("")
    assert cli.main(["export", str(run[0]), "--out", str(tmp_path / "afile" / "x")]) == 2
    stranger = tiny_recipe(tmp_path, 'model={name="dlrm", bottom=[8], top=[8]}')
    other = Trainer(stranger, tmp_path / "dlrm", progress=False)
    other.fit()
    other.close()
    with pytest.raises(ValueError, match="not this run's 'deepfm' model"):
        export_run(run[0], tmp_path / "z", checkpoint=layout.latest(tmp_path / "dlrm" / "checkpoints"))
    assert not (tmp_path / "z").exists()


@pytest.mark.slow
@pytest.mark.parametrize("form", ["fp16", "int8", "saec"])
def test_compressed_exports_predict_close_with_fewer_bytes(run, tmp_path, form):
    run_dir, recipe = run
    export_run(run_dir, tmp_path / "fp32")
    m = export_run(run_dir, tmp_path / form, form=form, ratio=4)
    exact, small = ServingModel.load(tmp_path / "fp32"), ServingModel.load(tmp_path / form)
    assert m["tables"]["emb"]["bytes"] < exact.manifest["tables"]["emb"]["bytes"]
    _, batches = eval_probabilities(recipe, m["checkpoint"], tmp_path)
    got = predict_all(small, batches)
    if form == "saec":  # every id reads its cluster's vector: the fp32 model with those values predicts the same
        t = small.tables["emb"]
        assert m["tables"]["emb"]["vectors"] < len(t) / 2  # at least 16 clusters a field and shard
        as_fp32 = SnapshotTable("fp32", t.width, t.ids, {"values": t.values()})
        np.testing.assert_array_equal(got, predict_all(ServingModel(exact.manifest, {"emb": as_fp32}, exact.runner, 12),
                                                       batches))
        assert np.abs(got - predict_all(exact, batches)).max() > 1e-3
    else:
        error = np.abs(got - predict_all(exact, batches))  # int8: a row's scale spans its wide weight too
        assert 0 < error.max() < {"fp16": 5e-3, "int8": 5e-2}[form] and error.mean() < {"fp16": 5e-4, "int8": 5e-3}[form]


# --- tables ----------------------------------------------------------------------------------


def slow_rows(form, values):
    """The forms' rounding, one value at a time."""
    out = np.empty_like(values)
    for i, row in enumerate(values):
        scale = max(abs(float(x)) for x in row) / 127
        for j, x in enumerate(row):
            if form == "fp16":
                out[i, j] = float(np.float16(x))
            elif form == "int8":
                out[i, j] = np.float32(np.int8(round(float(np.float32(x) / np.float32(scale))))) * np.float32(scale) \
                    if scale else 0.0
            else:
                out[i, j] = x
    return out


@pytest.mark.parametrize("form", ["fp32", "fp16", "int8"])
def test_table_forms_against_a_slow_reference(form, rng):
    ids = rng.choice(1 << 40, 300, replace=False).astype(np.int64)
    values = (rng.normal(size=(300, 5)) * rng.uniform(0.01, 3, (300, 1))).astype(np.float32)
    values[7] = 0  # a zero row: scale 0
    t = SnapshotTable.build(ids, values, form)
    unseen = np.array([-1, 1 << 50], np.int64)
    rows, known = t.lookup(np.concatenate([ids[::-1], unseen]))
    np.testing.assert_allclose(rows[:300], slow_rows(form, values)[::-1], rtol=0, atol=1e-6)
    assert known[:300].all() and not known[300:].any() and (rows[300:] == 0).all()
    assert t.nbytes == 300 * (8 + {"fp32": 20, "fp16": 10, "int8": 9}[form])


def test_saec_table_reads_each_ids_cluster_vector(rng):
    ids = np.arange(50, dtype=np.int64) * 7
    clusters = ClusteredTable(ids, rng.integers(0, 4, 50).astype(np.int32), rng.normal(size=(4, 3)).astype(np.float32))
    t = SnapshotTable.build(ids[::-1].copy(), np.zeros((50, 3), np.float32), "saec", clusters=clusters)
    query = np.array([0, 7, 8, 343], np.int64)
    rows, known = t.lookup(query)
    np.testing.assert_array_equal(rows, clusters.lookup(query))
    assert known.tolist() == [True, True, False, True]
    with pytest.raises(ValueError, match="clusters are fixed"):
        t.updated(ids[:1], np.ones((1, 3), np.float32), np.empty(0, np.int64))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 60), st.integers(0, 30), st.sampled_from([np.int64, np.float32,
                                                                                         np.int8, np.float16]))
def test_the_merge_kernel_is_numpys_take_and_insert(seed, n, m, dtype):
    """``merge`` (one pass, off the GIL) against its slow reference, ``np.insert(old[keep], at, new)``."""
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(0, 100, n))
    keep = rng.random(len(ids)) < 0.7
    new_ids = np.setdiff1d(np.unique(rng.integers(0, 100, m)), ids[keep])
    at = np.searchsorted(ids[keep], new_ids)
    for old, new in ((ids, new_ids), ((rng.random((len(ids), 3)) * 100).astype(dtype),
                                      (rng.random((len(new_ids), 3)) * 100).astype(dtype))):
        want, got = np.insert(old[keep], at, new, axis=0), merge(old, keep, new, at)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("form", ["fp32", "int8"])
def test_an_updated_table_equals_one_built_from_the_merged_rows(form, rng):
    ids = rng.choice(10_000, 500, replace=False).astype(np.int64)
    values = rng.normal(size=(500, 4)).astype(np.float32)
    t = SnapshotTable.build(ids, values, form)
    changed = np.concatenate([ids[:50], rng.choice(np.arange(10_000, 20_000), 30, replace=False)])
    new_values = rng.normal(size=(80, 4)).astype(np.float32)
    deleted = np.concatenate([ids[100:140], [123_456]])  # one never there
    rows = dict(zip(ids.tolist(), values))
    for k in deleted.tolist():
        rows.pop(k, None)
    rows.update(zip(changed.tolist(), new_values))
    expected = SnapshotTable.build(np.array(list(rows), np.int64), np.array(list(rows.values())), form)
    got = t.updated(changed, new_values, deleted)
    np.testing.assert_array_equal(got.ids, expected.ids)
    for k in expected.arrays:
        np.testing.assert_array_equal(got.arrays[k], expected.arrays[k])
    assert len(t) == 500  # the old table is untouched: a request being answered still reads it


# --- requests --------------------------------------------------------------------------------


def eval_lines(run_dir, n):
    return (run_dir.parent / "data").glob("*/eval.tsv").__next__().read_text().splitlines()[:n]


@pytest.mark.slow
def test_requests_parse_as_the_readers_do(run, tmp_path):
    lines = eval_lines(run[0], 64)
    (tmp_path / "part.tsv").write_text("\n".join(lines) + "\n")
    expected = next(iter(CriteoReader([tmp_path / "part.tsv"], 64))).sparse
    with_label = parse_request({"labelled_rows": lines}, 64).to_batch()
    without = parse_request({"rows": [ln.split("\t", 1)[1] for ln in lines]}, 64).to_batch()
    named = parse_request({"examples": [{name: (int(v) if name[0] == "I" else v)
                                         for name, v in zip([f"I{i}" for i in range(1, 14)] +
                                                            [f"C{i}" for i in range(1, 27)], ln.split("\t")[1:]) if v}
                                        for ln in lines]}, 64).to_batch()
    for batch in (with_label, without, named):
        assert set(batch.sparse) == set(expected)
        for f, bag in expected.items():
            np.testing.assert_array_equal(batch.sparse[f].values, bag.values)
            np.testing.assert_array_equal(batch.sparse[f].offsets, bag.offsets)
    torch.testing.assert_close(with_label.dense, named.dense, rtol=0, atol=0)


@pytest.mark.parametrize("body, status, says", [
    ({"rows": ["1\t2"]}, 400, "rows[0]: 2 tab-separated columns"),
    ({"rows": ["\t" * 39]}, 400, "rows[0]: 40 tab-separated columns; rows have 39"),  # a label: labelled_rows
    ({"labelled_rows": ["\t" * 38]}, 400, "labelled_rows[0]: 39 tab-separated columns; labelled_rows have 40"),
    ({"examples": [{}, {"I4": "7"}]}, 400, "examples[1]: I4 '7' is not an integer"),
    ({"examples": [{"C3": "abcdefabc"}]}, 400, "C3 'abcdefabc' is not a hex value"),
    ({"examples": [{"C30": "ab"}]}, 400, "unknown field 'C30'"),
    ({"examples": [{"x" * 100_000: 1}]}, 400, "unknown field '" + "x" * 64 + "'... (100000 characters)"),
    ({"examples": [{"C2": "f" * 100_000}]}, 400, "C2 '" + "f" * 64 + "'... (100000 characters) is not a hex"),
    ({"examples": [{"I2": list(range(100_000))}]}, 400, "I2 of type list is not an integer"),
    ({"examples": [{"I1": True}]}, 400, "I1 True"),
    ({"rows": [3]}, 400, "rows[0]: must be a string"),
    ({"rows": ["a\nb"]}, 400, "line break"),
    ({"rows": []}, 400, "non-empty list"),
    ({"rows": [], "examples": []}, 400, "one key"),
    ([1, 2], 400, "one key"),
    ({"examples": [{}] * 9}, 413, "more than the 8"),
])
def test_bad_requests_name_what_to_change(body, status, says):
    with pytest.raises(BadRequest, match=None) as e:
        parse_request(body, 8)
    assert e.value.status == status and says in str(e.value) and len(str(e.value)) < 300


@pytest.mark.slow
def test_a_bad_tsv_value_is_named(run):
    fields = eval_lines(run[0], 1)[0].split("\t")
    fields[20] = "xyz"  # C7
    with pytest.raises(BadRequest, match=r"labelled_rows\[0\]: C7 'xyz'"):
        parse_request({"labelled_rows": ["\t".join(fields)]}, 8)


# --- following training ----------------------------------------------------------------------


@pytest.mark.slow
def test_follower_applies_deltas_and_predicts_as_a_fresh_export(run, tmp_path, monkeypatch):
    run_dir, recipe = run
    root = run_dir / "checkpoints"
    assert layout.committed_steps(root)[-3:] == [4, 8, 12]
    export_run(run_dir, tmp_path / "at4", checkpoint=layout.step_dir(root, 4))
    export_run(run_dir, tmp_path / "at12", checkpoint=layout.step_dir(root, 12))
    old = ServingModel.load(tmp_path / "at4")
    whole = []
    monkeypatch.setattr(Follower, "_whole", lambda *a: whole.append(a))
    follower = Follower(run_dir)
    new = follower.next_model(old)
    assert new.step == 12 and old.step == 4 and not whole  # the deltas 8 and 12, applied on step 4
    assert follower.next_model(new) is None  # nothing newer
    fresh = ServingModel.load(tmp_path / "at12")
    np.testing.assert_array_equal(new.tables["emb"].ids, fresh.tables["emb"].ids)
    np.testing.assert_array_equal(new.tables["emb"].arrays["values"], fresh.tables["emb"].arrays["values"])
    _, batches = eval_probabilities(recipe, layout.step_dir(root, 12), tmp_path)
    np.testing.assert_array_equal(predict_all(new, batches), predict_all(fresh, batches))
    assert np.abs(predict_all(old, batches) - predict_all(fresh, batches)).max() > 1e-4  # it did change


def test_two_deltas_merge_as_applied_one_after_the_other():
    from cardinal.serve.follow import _merge

    ids = lambda *x: np.array(x, np.int64)  # noqa: E731
    rows = lambda *x: np.array([[v] for v in x], np.float32)  # noqa: E731
    older = {"t": (ids(1, 2), rows(10, 20), ids(3, 4)), "u": (ids(7), rows(70), ids())}
    newer = {"t": (ids(2, 3), rows(21, 30), ids(1, 5))}
    got = _merge(older, newer)
    assert sorted(zip(got["t"][0].tolist(), got["t"][1][:, 0].tolist())) == [(2, 21.0), (3, 30.0)]
    assert sorted(got["t"][2].tolist()) == [1, 4, 5]  # 3 deleted, then set again: not deleted
    assert got["u"][0].tolist() == [7]


@pytest.mark.slow
def test_follower_reads_whole_what_is_not_a_delta_on_the_served_checkpoint(run, tmp_path, monkeypatch):
    """The same step of another run (or a step no chain holds) is no base for this run's deltas."""
    run_dir, _ = run
    export_run(run_dir, tmp_path / "x", checkpoint=layout.step_dir(run_dir / "checkpoints", 4))
    old = ServingModel.load(tmp_path / "x")
    elsewhere = ServingModel({**old.manifest, "checkpoint": str(tmp_path / "other-run" / "step-0000000004")},
                             old.tables, old.runner, 4)
    deltas = []
    real = Follower._delta_rows
    monkeypatch.setattr(Follower, "_delta_rows", lambda self, *a: deltas.append(a) or real(self, *a))
    new = Follower(run_dir).next_model(elsewhere)
    assert new.step == 12 and not deltas
    fresh = ServingModel.load(export_run(run_dir, tmp_path / "y") and tmp_path / "y")
    np.testing.assert_array_equal(new.tables["emb"].arrays["values"], fresh.tables["emb"].arrays["values"])
    assert Follower(run_dir).next_model(old).step == 12 and len(deltas) == 2  # this run's step 4: its deltas


# --- the HTTP app ----------------------------------------------------------------------------


def with_client(server, fn):
    async def go():
        async with TestClient(TestServer(server.app(), host="127.0.0.1")) as client:
            return await fn(client)

    return asyncio.run(go())


@pytest.fixture
def exported(run, tmp_path):
    export_run(run[0], tmp_path / "x", checkpoint=layout.step_dir(run[0] / "checkpoints", 4))
    return ServingModel.load(tmp_path / "x")


def metric(text, name):
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


@pytest.mark.slow
def test_http_predicts_answers_health_and_counts_in_metrics(run, exported):
    lines = eval_lines(run[0], 10)
    server = PredictionServer(exported, max_batch=8)

    async def go(client):
        out = {}
        r = await client.post("/predict", json={"labelled_rows": lines[:3]})
        out["ok"] = (r.status, await r.json())
        r = await client.post("/predict", json={"examples": [{"I1": "x"}]})
        out["bad"] = (r.status, await r.json())
        r = await client.post("/predict", json={"labelled_rows": lines[:9]})
        out["big"] = r.status
        out["garbage"] = [(await client.post("/predict", data=body)).status
                          for body in (b"{not json", b"[" * 100_000 + b"]" * 100_000, b'{"labelled_rows": [' + b"9" * 5000 + b"]}",
                                       b"\xff\xfe")]
        out["health"] = ((await client.get("/healthz")).status, await (await client.get("/readyz")).json())
        out["metrics"] = await (await client.get("/metrics")).text()
        return out

    out = with_client(server, go)
    status, body = out["ok"]
    expected = exported.predict(parse_request({"labelled_rows": lines[:3]}, 8).to_batch())
    assert status == 200 and body["step"] == 4
    np.testing.assert_allclose(body["probabilities"], expected, rtol=0, atol=1e-7)
    assert out["bad"][0] == 400 and "I1 'x'" in out["bad"][1]["error"]
    assert (out["big"], out["garbage"]) == (413, [400] * 4)  # deep nesting and huge numbers too: no 500
    assert out["health"] == (200, {"ready": True, "step": 4})
    text = out["metrics"]
    assert metric(text, 'cardinal_serve_requests_total{status="200"}') == 1
    assert metric(text, 'cardinal_serve_requests_total{status="400"}') == 5
    assert metric(text, 'cardinal_serve_requests_total{status="413"}') == 1
    assert metric(text, "cardinal_serve_predictions_total") == 3
    assert metric(text, "cardinal_serve_lookups_total") > metric(text, "cardinal_serve_unknown_ids_total") >= 0
    assert metric(text, "cardinal_serve_request_seconds_count") == 7
    assert metric(text, "cardinal_serve_model_step") == 4


@pytest.mark.slow
def test_serve_refuses_a_poll_or_port_it_cannot_use(run, exported):
    from cardinal.serve.http import serve

    with pytest.raises(ValueError, match="--poll must be > 0"):
        PredictionServer(exported, follower=Follower(run[0]), poll_s=0)
    with pytest.raises(ValueError, match="--port must be in"):
        serve(PredictionServer(exported), port=70000)


@pytest.mark.slow
def test_an_oversized_body_is_refused_and_the_server_goes_on(run, exported):
    server = PredictionServer(exported, limits=ServeLimits(max_body_mb=0.01))
    lines = eval_lines(run[0], 2)

    async def go(client):
        big = await client.post("/predict", data=b"[" + b"1," * 20_000 + b"1]")
        ok = await client.post("/predict", json={"labelled_rows": lines})
        return big.status, ok.status

    assert with_client(server, go) == (413, 200)


@pytest.mark.slow
def test_concurrent_requests_share_model_calls(run, exported, monkeypatch):
    lines = eval_lines(run[0], 40)
    server = PredictionServer(exported)
    calls = []
    real = ServingModel.predict

    def slow(self, batch):
        calls.append(len(batch))
        threading.Event().wait(0.05)  # a model call long enough for the next requests to queue
        return real(self, batch)

    monkeypatch.setattr(ServingModel, "predict", slow)

    async def go(client):
        async def one(line):
            r = await client.post("/predict", json={"labelled_rows": [line]})
            return (await r.json())["probabilities"][0]
        return await asyncio.gather(*(one(ln) for ln in lines))

    got = with_client(server, go)
    monkeypatch.setattr(ServingModel, "predict", real)
    expected = exported.predict(parse_request({"labelled_rows": lines}, 64).to_batch())
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7)  # each request its own answer, in order
    assert sum(calls) == 40 and len(calls) < 10


@pytest.mark.slow
def test_a_reload_under_load_serves_old_or_new_never_a_mix(run, exported, tmp_path):
    run_dir, _ = run
    lines = eval_lines(run_dir, 30)
    newer = Follower(run_dir).next_model(exported)
    batch = parse_request({"labelled_rows": lines}, 64).to_batch()
    answers = {4: exported.predict(batch), 12: newer.predict(batch)}
    assert np.abs(answers[4] - answers[12]).max() > 1e-4
    server = PredictionServer(exported, follower=Follower(run_dir))

    async def go(client):
        async def one():
            r = await client.post("/predict", json={"labelled_rows": lines})
            return r.status, await r.json()

        first = await asyncio.gather(*(one() for _ in range(5)))
        reload = asyncio.get_running_loop().run_in_executor(None, server.reload)
        during = await asyncio.gather(*(one() for _ in range(20)))
        assert await reload
        after = await asyncio.gather(*(one() for _ in range(5)))
        return first + during + after, await (await client.get("/metrics")).text()

    results, text = with_client(server, go)
    steps = [body["step"] for _, body in results]
    assert all(s == 200 for s, _ in results) and steps[:5] == [4] * 5 and steps[-5:] == [12] * 5
    for _, body in results:
        np.testing.assert_allclose(body["probabilities"], answers[body["step"]], rtol=0, atol=1e-7)
    assert metric(text, 'cardinal_serve_reloads_total{result="ok"}') == 1
    assert metric(text, "cardinal_serve_model_step") == 12


@pytest.mark.slow
def test_a_failed_reload_keeps_the_served_model(exported, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "recipe.json").write_text(json.dumps(exported.manifest["recipe"]))
    follower = Follower(tmp_path / "run")
    bad = layout.step_dir(tmp_path / "run" / "checkpoints", 20)
    bad.mkdir(parents=True)
    (bad / layout.COMMIT).write_text("{torn")
    server = PredictionServer(exported, follower=follower)
    assert server.reload() is False and server.model is exported
    assert metric(generate(server), 'cardinal_serve_reloads_total{result="failed"}') == 1


def generate(server):
    from prometheus_client import generate_latest

    return generate_latest(server.metrics.registry).decode()


@pytest.mark.slow
def test_a_run_trained_on_clustered_rows_exports_what_eval_predicts(tmp_path):
    """compression.saec.ratio: the export reads each id's cluster row, as training's evaluation does."""
    recipe = tiny_recipe(tmp_path, "ps.shards=2", "compression.saec.ratio=4", "compression.saec.at=6")
    trainer = Trainer(recipe, tmp_path / "run", progress=False)
    trainer.fit()
    trainer.close()
    m = export_run(tmp_path / "run", tmp_path / "x")
    model = ServingModel.load(tmp_path / "x")
    expected, batches = eval_probabilities(recipe, m["checkpoint"], tmp_path)
    assert np.abs(predict_all(model, batches) - expected).max() <= 1e-5
    values = model.tables["emb"].arrays["values"]
    assert len(np.unique(values, axis=0)) < len(values) / 2  # ids of one cluster share their row
