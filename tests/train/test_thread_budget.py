"""One thread budget (train.threads) for torch, Cardinal's kernels and numba; the trainer's
reading thread stopped before the reader's counts are checked."""

import threading

import numba
import pytest
import torch

from cardinal import parallel
from cardinal.recipe import load
from cardinal.train import Trainer, threads
from helpers.recipes import tiny_recipe


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads(), parallel.threads(), numba.get_num_threads()
    yield
    torch.set_num_threads(before[0])
    parallel.set_threads(before[1])
    numba.set_num_threads(before[2])


def test_the_trainer_applies_train_threads_to_torch_kernels_and_numba(tmp_path, restore_threads):
    Trainer(tiny_recipe(tmp_path, "train.threads=1"), tmp_path / "run", progress=False)
    assert (torch.get_num_threads(), parallel.threads(), numba.get_num_threads()) == (1, 1, 1)
    Trainer(tiny_recipe(tmp_path, "train.threads=3"), tmp_path / "run3", progress=False)
    assert (torch.get_num_threads(), parallel.threads()) == (3, 3)
    assert numba.get_num_threads() == min(3, numba.config.NUMBA_NUM_THREADS)


def test_zero_means_the_launchers_share_else_this_process_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.budget(0) == parallel.available_cores()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.budget(0) == 1
    assert threads.budget(5) == 5


def test_a_negative_budget_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="train.threads"):
        load(None, ["train.threads=-1"])
    with pytest.raises(ValueError, match="train.threads"):
        threads.budget(-2)


@pytest.mark.slow
def test_the_reading_thread_is_stopped_before_the_bad_row_check(tmp_path, restore_threads):
    """train.steps ends the run mid-epoch: the prefetcher must not still be reading (and
    counting bad rows) when the trainer checks the share of bad rows read."""
    trainer = Trainer(tiny_recipe(tmp_path, "train.steps=3"), tmp_path / "run", progress=False)
    seen = []

    class Spy:
        def check(self):
            seen.append([t.name for t in threading.enumerate()])

    real = trainer.train_data

    class Reader:
        sparse_fields, dense_fields, bad = real.sparse_fields, real.dense_fields, Spy()

        def __iter__(self):
            return iter(real)

    trainer.train_data = Reader()
    trainer.fit()
    assert seen and "cardinal-prefetch" not in seen[0]


def test_torchruns_one_thread_for_several_local_workers_is_not_taken_as_a_share(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torchrun with --nproc-per-node 4 sets 1 whatever the cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert threads.budget(0) == max(1, parallel.available_cores() // 4)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # a real share, set by someone on purpose
    assert threads.budget(0) == 3


@pytest.mark.parametrize("cores, expected, kernels",
                         [(1, 1, 1), (2, 2, 1), (3, 2, 1), (4, 2, 2), (8, 4, 4), (16, 8, 8)])
def test_embedded_servers_leave_half_the_cores_to_their_shards(monkeypatch, cores, expected, kernels):
    """The shards apply pushes and serve pulls while torch computes: the worker takes half the cores
    (torch at least 2, the kernels at least 1); with servers elsewhere it takes them all; an explicit
    train.threads is kept for both."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(parallel, "available_cores", lambda: cores)
    assert threads.budget(0, embedded=True) == expected
    assert threads.kernel_budget(0, embedded=True) == kernels
    assert threads.budget(0) == threads.kernel_budget(0) == cores
    assert threads.budget(5, embedded=True) == threads.kernel_budget(5, embedded=True) == 5


def test_the_trainer_halves_the_budget_only_for_embedded_servers(tmp_path, monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(parallel, "available_cores", lambda: 8)
    assert Trainer(tiny_recipe(tmp_path), tmp_path / "run", progress=False).threads == 4
    assert parallel.threads() == 4


def test_on_two_cores_the_trainer_gives_torch_both_and_the_kernels_one(tmp_path, monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(parallel, "available_cores", lambda: 2)
    assert Trainer(tiny_recipe(tmp_path), tmp_path / "run", progress=False).threads == 2
    assert (torch.get_num_threads(), parallel.threads(), numba.get_num_threads()) == (2, 1, 1)
