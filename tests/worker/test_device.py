"""The device path on the CPU: ``train.device``, the staging helper, the collection and a whole
run through the staged path, the input metrics, and the device parts of DDP and GlobalBatchNorm.

The staged path (``DeviceRows(cpu, staged=True)``) runs everything a GPU worker runs except the
CUDA calls themselves (pinned memory, the side stream, events): buffers, rings, the staged
index and rows, ``TorchPooling``, the gradient back to the host. Tolerance against the compiled
CPU path: torch's float32 defaults (rtol 1.3e-6, atol 1e-5) for one step; a whole run 1e-4.
"""

import json

import numpy as np
import pytest
import torch
import torch.distributed as dist

from cardinal.embedding import TableConfig
from cardinal.models.global_norm import GlobalBatchNorm
from cardinal.ps import StoreConfig, connect
from cardinal.recipe import load
from cardinal.recipe.train import TrainConfig
from cardinal.train import Trainer, trainer as trainer_module, workers as workers_module
from cardinal.train.input_meter import InputMeter
from cardinal.worker import EmbeddingCollection
from cardinal.worker import device as device_module
from cardinal.worker.device import DeviceBatches, DeviceRows, host_value, resolve_device
from cardinal.worker.pooling import TorchPooling
from cardinal.worker.sources import PSSource
from helpers.recipes import tiny_recipe
from helpers.bags import bag

CONFIG = StoreConfig((TableConfig("a", 4, init_scale=0.5), TableConfig("b", 3, init_scale=0.5)),
                     {"name": "sgd", "lr": 1.0})
FEATURES = {"x": "a", "y": "a", "z": "b"}


BATCHES = [{"x": bag([[1, 2], [], [2, 2, 3]]), "y": bag([[3], [4], []]), "z": bag([[9], [9], [10]])},
           {"x": bag([[2], [5], [1, 1]]), "y": bag([[], [4], [6]]), "z": bag([[10], [11], [9]])}]


# --- train.device -----------------------------------------------------------------------

def test_device_resolution(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("cpu") == resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"train.device = 'cuda'.*no CUDA device.*'cpu' or 'auto'"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="train.device must be one of"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(device_module, "cuda_failure", lambda device: None)  # a GPU that works
    monkeypatch.setenv("LOCAL_RANK", "3")  # torchrun's local rank picks the GPU, modulo those seen
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device("cpu") == torch.device("cpu")


def test_train_device_is_checked_in_the_recipe_and_by_the_trainer(tmp_path, monkeypatch):
    assert TrainConfig().device == "auto"
    with pytest.raises(ValueError, match="train.device must be 'cpu', 'cuda' or 'auto', got 'gpu'"):
        load(None, ['train.device="gpu"'])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="train.device = 'cuda'"):
        Trainer(tiny_recipe(tmp_path, 'train.device="cuda"'), tmp_path / "run", progress=False)


# --- the staging helper -----------------------------------------------------------------

def test_staging_reuses_a_ring_of_buffers_and_grows_them():
    staging = DeviceRows(torch.device("cpu"), staged=True)
    a, b, c = (np.full((10, 4), v, np.float32) for v in (1, 2, 3))
    sa = staging.stage("rows", a)
    first = staging._rings["rows"][0].data.data_ptr()
    sb = staging.stage("rows", b)
    assert (staging.grown, staging.reused) == (2, 0)  # two slots: one filled while the other is copied
    sc = staging.stage("rows", c)                     # the first slot again, overwritten
    assert (staging.grown, staging.reused) == (2, 1)
    assert staging._rings["rows"][0].data.data_ptr() == first
    for staged, want in ((sa, a), (sb, b), (sc, c)):  # each staged tensor is its own copy
        np.testing.assert_array_equal(staged.get().numpy(), want)
    assert staging.h2d_bytes == 3 * a.nbytes
    mid = np.arange(5000, dtype=np.int8)            # 5,000 bytes: outgrows slot 1's 4,096, which doubles
    np.testing.assert_array_equal(staging.stage("rows", mid).get().numpy(), mid)
    assert staging.grown == 3 and staging._rings["rows"][1].data.numel() == 8192
    big = np.arange(5000, dtype=np.int64)           # 40,000 bytes: more than double slot 0's 4,096
    np.testing.assert_array_equal(staging.stage("rows", big).get().numpy(), big)
    assert staging.grown == 4 and staging._rings["rows"][0].data.numel() == big.nbytes
    staging.stage("rows", mid[:10])
    staging.stage("rows", big[:7])                  # smaller: the grown slots are reused, never shrunk
    assert (staging.grown, staging.reused) == (4, 3)
    assert [b.data.numel() for b in staging._rings["rows"]] == [big.nbytes, 8192]
    assert staging.stage("empty", np.zeros((0, 4), np.float32)).get().shape == (0, 4)


def test_staging_takes_device_tensors_as_they_are_and_copies_nothing_unstaged():
    staged = DeviceRows(torch.device("cpu"), staged=True)
    t = torch.ones(3, 2)
    assert staged.stage("rows", t).get() is t and staged.h2d_bytes == 0
    plain = DeviceRows(torch.device("cpu"))
    array = np.ones((3, 2), np.float32)
    out = plain.stage("rows", array).get()
    assert np.shares_memory(out.numpy(), array) and plain.h2d_bytes == 0 and not plain._rings
    with pytest.raises(ValueError, match="slots must be >= 2"):
        DeviceRows(torch.device("cpu"), slots=1)


def test_batches_staged_ahead_are_used_only_for_that_batch():
    """The next batch's dense features and labels are copied ahead; a batch other than the one
    staged (the staged one was skipped: all its lines bad) is copied when asked for."""
    from cardinal.data.batch import Batch

    staging = DeviceRows(torch.device("cpu"), staged=True)
    feed = DeviceBatches(staging)
    one, two = (Batch(torch.full((4, 3), float(v)), {}, torch.full((4,), float(v))) for v in (1, 2))
    feed.stage(one)
    copied = staging.h2d_bytes
    dense, labels = feed.get(one)
    assert staging.h2d_bytes == copied == 4 * 3 * 4 + 4 * 4  # no second copy
    assert torch.equal(dense, one.dense) and torch.equal(labels, one.labels)
    feed.stage(one)
    dense, labels = feed.get(two)
    assert torch.equal(dense, two.dense) and torch.equal(labels, two.labels)


def test_host_value_reads_a_cpu_scalar():
    assert host_value(torch.tensor(2.5))() == 2.5


# --- the collection on the staged path --------------------------------------------------

class TensorRows(PSSource):
    """A row source that hands back tensors already on the collection's device (as a GPU cache does)."""

    def pull(self, table, ids, *, create, step):
        handle = super().pull(table, ids, create=create, step=step)

        class AsTensor:
            def wait(self, timeout=None):
                return torch.from_numpy(handle.wait(timeout))
        return AsTensor()


def train_two_steps(pooling: str, staging: DeviceRows | None, source=None):
    """Two async steps with a prefetch (and the next rows staged ahead): pooled outputs, rows after."""
    client = connect(CONFIG, 2)
    rows = source(client) if source else client
    emb = EmbeddingCollection(rows, FEATURES, pooling, staging=staging)
    outs = []
    for k, sparse in enumerate(BATCHES):
        emb.step = k
        out = emb(sparse)
        if k + 1 < len(BATCHES):
            emb.prefetch(BATCHES[k + 1], k + 1)
        weights = {f: torch.arange(v.numel(), dtype=torch.float32).view(v.shape) for f, v in out.items()}
        sum((weights[f] * v).sum() for f, v in out.items()).backward()
        emb.stage_ahead()
        outs.append({f: v.detach().clone() for f, v in out.items()})
    emb.flush()
    after = {t: client.pull(t, np.arange(0, 12, dtype=np.int64), create=False).wait() for t in ("a", "b")}
    return outs, after, emb


@pytest.mark.parametrize("pooling", ["sum", "mean", "none"])
def test_the_staged_torch_path_pools_and_trains_as_the_compiled_path(pooling):
    outs, after, plain = train_two_steps(pooling, None)
    staging = DeviceRows(torch.device("cpu"), staged=True)
    d_outs, d_after, emb = train_two_steps(pooling, staging)
    assert isinstance(emb.pooler, TorchPooling) and emb.metrics()["h2d_bytes"] > 0
    assert plain.metrics() == {"h2d_bytes": 0}
    for o, d in zip(outs, d_outs):
        assert o.keys() == d.keys()
        for f in o:
            torch.testing.assert_close(d[f], o[f])
    for t in after:  # the pushed gradients (second step's pulls saw the first's pushes)
        torch.testing.assert_close(torch.from_numpy(d_after[t]), torch.from_numpy(after[t]))


def test_the_staged_bytes_are_the_unique_rows_the_inverse_and_the_offsets():
    """The inverse index and the offsets cross as int32 (half of int64's bytes; both one type, as
    embedding_bag wants); the pooled outputs and gradients are checked against the CPU path above."""
    staging = DeviceRows(torch.device("cpu"), staged=True)
    emb = EmbeddingCollection(connect(CONFIG, 2), FEATURES, "sum", staging=staging)
    emb(BATCHES[0])
    unique = {"a": 4, "b": 2}  # a: 1 2 3 4; b: 9 10
    nnz = {"a": 7, "b": 3}
    bags = {"a": 6, "b": 3}
    dims = {"a": 4, "b": 3}
    want = sum(4 * unique[t] * dims[t] + 4 * nnz[t] + 4 * (bags[t] + 1) for t in unique)  # int32 indices
    assert staging.h2d_bytes == want


def test_rows_already_on_the_device_are_not_copied():
    staging = DeviceRows(torch.device("cpu"), staged=True)
    outs, after, _ = train_two_steps("sum", None)
    t_outs, t_after, _ = train_two_steps("sum", staging, source=lambda c: TensorRows(c, 4))
    index_bytes = sum(4 * len(np.concatenate([b[f].values for f in FEATURES])) + 4 * (3 * 3 + 2) for b in BATCHES)
    assert staging.h2d_bytes == index_bytes  # inverse and offsets only: no row crossed
    for o, d in zip(outs, t_outs):
        for f in o:
            torch.testing.assert_close(d[f], o[f])
    for t in after:
        torch.testing.assert_close(torch.from_numpy(t_after[t]), torch.from_numpy(after[t]))


def test_stage_ahead_copies_the_next_rows_before_the_next_forward():
    staging = DeviceRows(torch.device("cpu"), staged=True)
    emb = EmbeddingCollection(connect(CONFIG, 2), FEATURES, "sum", staging=staging)
    emb(BATCHES[0])
    emb.prefetch(BATCHES[1], 1)  # its inverse and offsets are staged at once
    before = staging.h2d_bytes
    emb.stage_ahead()
    rows = 4 * (5 * 4 + 3 * 3)   # batch 1: a has 1 2 4 5 6 (dim 4), b has 9 10 11 (dim 3)
    assert staging.h2d_bytes - before == rows
    emb(BATCHES[1])
    assert staging.h2d_bytes - before == rows  # nothing left to copy at the forward


def test_staging_needs_torch_pooling():
    from cardinal.worker.pooling import CompiledPooling

    with pytest.raises(ValueError, match="pooled by torch ops"):
        EmbeddingCollection(connect(CONFIG, 1), FEATURES, staging=DeviceRows(torch.device("cpu"), staged=True),
                            pooler=CompiledPooling())


# --- a whole run through the device path ------------------------------------------------

def rows_of(trainer, table="emb"):
    ids = np.arange(-5000, 5000, dtype=np.int64)
    return trainer.client.pull(table, ids, create=False).wait()


@pytest.mark.slow
def test_a_run_through_the_staged_path_equals_the_cpu_path(tmp_path, monkeypatch):
    flags = ["train.steps=10", "train.baseline=\"none\"", "checkpoint.minutes=0"]
    plain = Trainer(tiny_recipe(tmp_path, *flags, 'train.device="cpu"'), tmp_path / "plain", progress=False)
    s_plain = plain.fit()
    assert plain.staging is None and s_plain["h2d_bytes"] == 0 and s_plain["device"] == "cpu"
    made = []
    monkeypatch.setattr(trainer_module, "staging_for",
                        lambda device: made.append(DeviceRows(device, staged=True)) or made[-1])
    staged = Trainer(tiny_recipe(tmp_path, *flags), tmp_path / "staged", progress=False)
    s_staged = staged.fit()
    assert staged.staging is made[0] and isinstance(staged.embedding.pooler, TorchPooling)
    assert s_staged["h2d_bytes"] > 0 and s_staged["h2d_bytes_per_step"] == pytest.approx(s_staged["h2d_bytes"] / 10)
    assert s_staged["eval_auc"] == pytest.approx(s_plain["eval_auc"], abs=1e-4)
    assert s_staged["eval_logloss"] == pytest.approx(s_plain["eval_logloss"], abs=1e-4)
    np.testing.assert_allclose(rows_of(staged), rows_of(plain), rtol=1e-4, atol=1e-5)
    for k, v in plain.model.state_dict().items():
        torch.testing.assert_close(staged.model.state_dict()[k], v, rtol=1e-4, atol=1e-5)
    lines = [json.loads(x) for x in (tmp_path / "staged" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in lines if "loss" in r]
    assert steps and all(r["h2d_bytes_per_step"] > 0 and 0 <= r["input_wait_share"] <= 1 for r in steps)
    plain_lines = [json.loads(x) for x in (tmp_path / "plain" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["h2d_bytes_per_step"] == 0 for r in plain_lines if "loss" in r)


# --- the input metrics ------------------------------------------------------------------

def test_the_input_meter_reports_per_interval_and_sets_evaluations_aside():
    class Staging:
        h2d_bytes = 0

        def wait_seconds(self):
            return 0.0
    staging, data, pulls = Staging(), {"data": 0.0}, {"pull_wait": 0.0}
    meter = InputMeter(staging, [data, pulls])
    for _ in range(4):  # 4 steps of 1 s: 100 bytes and 0.25 s of waits each
        meter.steps += 1
        staging.h2d_bytes += 100
        data["data"] += 0.1
        pulls["pull_wait"] += 0.15
    assert meter.metrics(4.0) == pytest.approx({"h2d_bytes_per_step": 100, "input_wait_share": 0.25})
    with meter.excluded():  # an evaluation: stages and waits, but is no training step
        staging.h2d_bytes += 10_000
        pulls["pull_wait"] += 5.0
    meter.steps += 1
    staging.h2d_bytes += 300
    data["data"] += 0.5
    assert meter.metrics(5.0) == pytest.approx({"h2d_bytes_per_step": 300, "input_wait_share": 0.5})
    assert meter.summary(5.0) == pytest.approx({"h2d_bytes_per_step": 140, "input_wait_share": 1.5 / 5,
                                                "h2d_bytes": 700})
    assert InputMeter(None, [{}]).summary(0.0) == {"h2d_bytes_per_step": 0.0, "input_wait_share": 0.0,
                                                   "h2d_bytes": 0}


# --- DDP and GlobalBatchNorm on the device ----------------------------------------------

def test_workers_pick_nccl_with_gloo_for_cuda_and_gloo_alone_on_the_cpu(monkeypatch):
    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.append(backend))
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(str(device)))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: type("P", (), {"uuid": "GPU-1"}))
    monkeypatch.setattr(dist, "all_gather_object", lambda out, mine: out.__setitem__(slice(None), ["GPU-0", mine]))
    wrapped = {}
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel",
                        lambda model, **kw: wrapped.update(kw) or type("DDP", (), {"register_comm_hook": print})())
    workers_module.Workers(10, torch.device("cpu")).wrap(torch.nn.Linear(2, 2))
    assert calls == ["gloo"] and wrapped == {"device_ids": None}
    calls.clear()
    workers_module.Workers(10, torch.device("cuda", 1)).wrap(torch.nn.Linear(2, 2))
    assert calls == ["cuda:1", "cpu:gloo,cuda:nccl"] and wrapped == {"device_ids": [1]}


def test_global_batch_norm_reduces_its_statistics_on_the_inputs_device(monkeypatch):
    """The statistics are built where ``x`` lives (the meta device stands in for CUDA here)."""
    class Reduced(Exception):
        pass
    seen = []

    def all_reduce(t):
        seen.append(t.device)
        raise Reduced
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    norm = GlobalBatchNorm(3).to("meta")
    with pytest.raises(Reduced):
        norm(torch.empty(5, 3, device="meta"))
    assert seen == [torch.device("meta")]


# --- review (R2) --------------------------------------------------------------------------

def test_a_batch_staged_ahead_then_dropped_is_never_served_for_a_new_batch_at_its_address():
    """The staged batch was skipped and freed; CPython hands its memory, so its id(), to the next
    object of its size: a new batch there must get its own features and labels, not the old one's."""
    from cardinal.data.batch import Batch

    feed = DeviceBatches(DeviceRows(torch.device("cpu"), staged=True))
    old = (torch.full((4, 3), 1.0), torch.full((4,), 1.0))
    new, sparse = (torch.full((4, 3), 2.0), torch.full((4,), 2.0)), {}
    one = Batch(old[0], sparse, old[1])
    feed.stage(one)
    address = id(one)
    del one
    kept = [Batch(new[0], sparse, new[1])]
    while id(kept[-1]) != address and len(kept) < 1000:  # freed: the first new one has its address
        kept.append(Batch(new[0], sparse, new[1]))
    dense, labels = feed.get(kept[-1])
    assert torch.equal(dense, new[0]) and torch.equal(labels, new[1])


def global_norm_of_two(monkeypatch):
    """A GlobalBatchNorm that believes it is one of two workers; the other's share is empty."""
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist, "all_reduce", lambda t: None)
    return GlobalBatchNorm(3)


def test_global_batch_norm_never_reads_the_global_count_on_the_host(monkeypatch):
    """On CUDA `if n < 2` on the all-reduced count is a device-to-host sync in every forward; the
    meta device (no values at all) stands in: any host read of a tensor there raises."""
    norm = global_norm_of_two(monkeypatch).to("meta")
    assert norm(torch.empty(5, 3, device="meta")).shape == (5, 3)


def test_global_batch_norm_without_a_host_branch_keeps_both_outcomes(monkeypatch):
    norm = global_norm_of_two(monkeypatch)
    x = torch.randn(8, 3) * 4 + 1
    plain = torch.nn.BatchNorm1d(3)
    out, want = norm(x), plain(x)
    torch.testing.assert_close(out, want)  # 8 examples: the batch's statistics
    (out * torch.arange(24.0).view(8, 3)).sum().backward()  # after the running statistics moved on
    (want * torch.arange(24.0).view(8, 3)).sum().backward()
    torch.testing.assert_close(norm.weight.grad, plain.weight.grad)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(norm, name), getattr(plain, name))
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    one = torch.randn(1, 3)
    out = norm(one)  # one example in the global batch: the running statistics, left as they were
    assert all(torch.equal(v, before[k]) for k, v in norm.state_dict().items())
    norm.eval()
    assert torch.equal(out, norm(one))


def test_auto_falls_back_to_the_cpu_when_cuda_is_present_but_fails(monkeypatch, caplog):
    """torch.cuda.is_available() says True, but the first kernel fails (here: this CPU build of
    torch, as a driver too old or a GPU without kernels for it would): auto trains on the CPU,
    saying why; cuda is an error naming the failure."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with caplog.at_level("WARNING"):
        assert resolve_device("auto") == torch.device("cpu")
    assert "cuda:0 is present but fails" in caplog.text
    with pytest.raises(ValueError, match=r"train.device = 'cuda', but cuda:0 is present and fails \(.+\)"):
        resolve_device("cuda")


@pytest.mark.parametrize("uuids, fallback, want", [
    (["GPU-a", "GPU-b"], False, torch.device("cuda", 0)),  # a GPU each: nccl
    (["GPU-a", "GPU-a"], True, torch.device("cpu")),       # auto, one GPU for two workers: the CPU
    (["GPU-a", "GPU-a"], False, ValueError),               # cuda, one GPU for two: an error saying so
])
def test_workers_that_would_share_a_gpu_are_found_before_nccl(monkeypatch, uuids, fallback, want):
    """`cardinal launch --workers 2` on a one-GPU host puts LOCAL_RANK 0 and 1 on cuda:0 (0 % 1,
    1 % 1); nccl fails at DDP's first broadcast. The workers compare their GPUs' UUIDs first."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: None)
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: type("P", (), {"uuid": uuids[0]}))
    monkeypatch.setattr(dist, "all_gather_object", lambda out, mine: out.__setitem__(slice(None), uuids))
    if want is ValueError:
        with pytest.raises(ValueError, match=r"workers \[0, 1\] would share a GPU.*at most 1 workers per host"):
            workers_module.Workers(10, torch.device("cuda", 0), fallback=fallback)
    else:
        assert workers_module.Workers(10, torch.device("cuda", 0), fallback=fallback).device == want
