"""The GPU paths, checked where a CUDA device is present (skipped elsewhere, saying why), and
``benchmarks/gpu.py``'s smoke run, which runs anywhere.

On a GPU: a tiny run on cuda equals the CPU run within a tolerance (pooling and the dense model
add in other orders on the device: 1e-3 on AUC and logloss, rows within rtol 1e-3); staging
uses pinned buffers, non-blocking copies on a side stream and events; a training step syncs the
host only in the pushes (the rows' gradients copied back); the torch pooling's backward is
deterministic (bitwise, under ``torch.use_deterministic_algorithms``); two workers over nccl
train as two over gloo.
"""

import json
import os
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from cardinal.train import Trainer
from cardinal.worker.device import DeviceRows
from cardinal.worker.pooling import TorchPooling
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

ROOT = Path(__file__).resolve().parents[2]
NO_CUDA = "no CUDA device (torch.cuda.is_available() is False): the GPU paths are checked on a GPU machine"
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)


# --- anywhere ---------------------------------------------------------------------------

def bench(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    inherited = os.environ.get("PYTHONPATH")  # kept: a machine may hold packages there (the device kit's)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *([inherited] if inherited else [])])}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), *args, "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=280, env=env, cwd=tmp_path)


@pytest.mark.slow  # a process and four small training runs
@pytest.mark.timeout(300)
def test_the_gpu_benchmark_runs_small_on_the_cpu(tmp_path):
    done = bench("--device", "cpu", "--steps", "3", "--rows", "4000", "--batch", "256", "--table-rows", "4096",
                 tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_smoke_cpu.json").read_text())
    runs = [r["run"] for r in result["rows"]]
    assert runs[0].startswith("Cardinal, train.device=cpu") and runs[-1] == "dense-only bound" and len(runs) == 5
    assert all(r["samples/s"] > 0 for r in result["rows"])
    assert all(0 < r["eval AUC"] <= 1 for r in result["rows"][:4])
    assert result["steps"] == 3 and "Cardinal / best plain PyTorch" in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: the benchmark would run in full")
def test_the_gpu_benchmark_says_there_is_no_gpu_and_exits_cleanly(tmp_path):
    done = bench(tmp_path=tmp_path)
    assert done.returncode == 0 and done.stdout.count("\n") == 1 and "no CUDA device" in done.stdout
    assert not list(tmp_path.iterdir())  # nothing measured, nothing written


# --- on a CUDA device -------------------------------------------------------------------

def run(tmp_path, name, *extra):
    trainer = Trainer(tiny_recipe(tmp_path, "train.steps=10", 'train.baseline="none"', *extra), tmp_path / name,
                      progress=False)
    return trainer, trainer.fit()


@cuda
def test_a_tiny_run_on_cuda_equals_the_cpu_run_within_tolerance(tmp_path):
    cpu, s_cpu = run(tmp_path, "cpu", 'train.device="cpu"')
    gpu, s_gpu = run(tmp_path, "gpu", 'train.device="cuda"')
    assert s_gpu["device"].startswith("cuda") and s_gpu["h2d_bytes_per_step"] > 0 and s_cpu["h2d_bytes"] == 0
    assert 0 <= s_gpu["input_wait_share"] <= 1
    assert s_gpu["eval_auc"] == pytest.approx(s_cpu["eval_auc"], abs=1e-3)
    assert s_gpu["eval_logloss"] == pytest.approx(s_cpu["eval_logloss"], abs=1e-3)
    ids = np.arange(-5000, 5000, dtype=np.int64)
    np.testing.assert_allclose(gpu.client.pull("emb", ids, create=False).wait(),
                               cpu.client.pull("emb", ids, create=False).wait(), rtol=1e-3, atol=1e-4)
    for k, v in cpu.model.state_dict().items():
        torch.testing.assert_close(gpu.model.state_dict()[k].cpu(), v, rtol=1e-3, atol=1e-4)


@cuda
def test_staging_is_pinned_non_blocking_and_ordered_by_events():
    staging = DeviceRows(torch.device("cuda"))
    arrays = [np.full((1000, 16), v, np.float32) for v in range(4)]
    staged = [staging.stage("rows", a) for a in arrays]
    assert all(b.data.is_pinned() for b in staging._rings["rows"])
    assert staged[0]._event is not None  # a copy under way, waited on by the compute stream at get()
    for s, a in zip(staged, arrays):
        t = s.get()
        assert t.is_cuda and s._event is None
        np.testing.assert_array_equal(t.cpu().numpy(), a)
    assert (staging.grown, staging.reused) == (2, 2) and staging.h2d_bytes == 4 * arrays[0].nbytes
    assert staging.wait_seconds() >= 0 and staging._waits == []
    on_gpu = torch.ones(3, device="cuda")
    assert staging.stage("rows", on_gpu).get() is on_gpu


@cuda
def test_a_training_step_syncs_the_host_only_in_the_pushes(tmp_path):
    trainer = Trainer(tiny_recipe(tmp_path, 'train.device="cuda"', 'train.baseline="none"'), tmp_path / "run",
                      progress=False)
    batches = iter(trainer.train_data)
    batch, upcoming = next(batches), next(batches)
    trainer._train_step(batch, len(batch), upcoming)  # warm up: buffers, kernels, allocator
    trainer.step += 1
    stacks = []

    def record(message, *args, **kwargs):  # only the step's sync warnings: setting the mode warns too (torch 2.11)
        stack = traceback.extract_stack()
        if "synchroniz" in str(message) and not any(f.name == "set_sync_debug_mode" for f in stack):
            stacks.append(stack)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            trainer._train_step(upcoming, len(upcoming), next(batches))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    outside = [s for s in stacks if not any(f.name == "push" and f.filename.endswith("collection.py") for f in s)]
    assert not outside, "host syncs outside the pushes:\n" + "\n".join("".join(s.format()[-4:]) for s in outside)


@cuda
def test_torch_pooling_backward_is_deterministic_on_cuda():
    rng = np.random.default_rng(0)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 6, 4096 * 3))]).astype(np.int64)
    inverse = rng.integers(0, 500, offsets[-1]).astype(np.int64)  # hot rows: many adds per row
    weights = torch.randn(4096, 3, 16, device="cuda")
    torch.use_deterministic_algorithms(True)
    try:
        grads = []
        for _ in range(3):
            rows = torch.randn(500, 16, device="cuda", generator=torch.Generator("cuda").manual_seed(1),
                               requires_grad=True)
            (TorchPooling().pool(rows, inverse, offsets, 3, False) * weights).sum().backward()
            grads.append(rows.grad.clone())
    finally:
        torch.use_deterministic_algorithms(False)
    assert all(torch.equal(g, grads[0]) for g in grads)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason=NO_CUDA if not torch.cuda.is_available() else
                    "nccl between two workers needs two CUDA devices; this machine has one")
@pytest.mark.timeout(600)
def test_two_workers_over_nccl_train_as_two_over_gloo(tmp_path):
    def launch(device: str) -> dict:
        sets = [f'data.cache_dir="{tmp_path / "data"}"', f'train.run_dir="{tmp_path / device}"',
                "data.synthetic.rows=6000", "data.synthetic.eval_rows=1000", "data.synthetic.vocab=300",
                "data.batch_size=250", "model.hidden=[16]", "embedding.dim=4", f'train.device="{device}"',
                'train.baseline="none"', "train.steps=12", "ps.timeout_s=20"]
        cmd = [sys.executable, "-m", "cardinal.cli", "launch", "--servers", "1", "--workers", "2", "--",
               *sum((["--set", s] for s in sets), [])]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (run_dir,) = (tmp_path / device).iterdir()
        return json.loads((run_dir / "summary.json").read_text())
    gloo, nccl = launch("cpu"), launch("cuda")
    assert nccl["workers"] == 2 and nccl["device"].startswith("cuda")
    assert nccl["eval_auc"] == pytest.approx(gloo["eval_auc"], abs=2e-3)
