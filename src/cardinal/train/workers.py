"""This process's place among the workers, and the few collectives the trainer needs.

Started by ``torchrun`` (or ``cardinal launch``), a worker finds RANK and WORLD_SIZE in its
environment and joins a process group: gloo on the CPU; on CUDA, nccl for CUDA tensors (DDP's
gradients, GlobalBatchNorm's statistics) and gloo for the CPU tensors of the trainer's small
collectives (``sum``, ``gather``, barriers, what worker 0 alone reads: ``from_leader``), one group
with both backends, made on the rendezvous store a resume's recipe came through when it did
(``leader_reads.before_group``). Alone, it is rank 0 of 1 and every collective is a no-op. Dense
parameters are data-parallel (DistributedDataParallel); embedding rows never travel this path,
only the parameter servers'.
"""

import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from cardinal.train import leader_reads

log = logging.getLogger(__name__)


class Workers:
    def __init__(self, timeout_s: float = 300.0, device: torch.device = torch.device("cpu"), fallback: bool = False):
        """``fallback`` (train.device = "auto"): workers that would share a GPU train on the CPU
        instead of failing; ``device`` is then where this worker trains (read it back)."""
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.device = device
        if device.type == "cuda":
            torch.cuda.set_device(device)  # nccl and DDP use the current device
        if self.world > 1 and not dist.is_initialized():
            backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
            timeout, store = timedelta(seconds=timeout_s), leader_reads.joined()
            if store is None:
                dist.init_process_group(backend, timeout=timeout)
            else:
                store.set_timeout(timeout)
                dist.init_process_group(backend, timeout=timeout, store=dist.PrefixStore("default_pg", store),
                                        rank=int(os.environ["RANK"]), world_size=self.world)
        self.rank = dist.get_rank() if self.world > 1 else 0
        if self.world > 1 and device.type == "cuda":
            self.device = self._own_gpu(device, fallback)

    def _own_gpu(self, device: torch.device, fallback: bool) -> torch.device:
        """nccl needs a GPU per worker: more workers on a host than GPUs (``cardinal launch --workers 2``
        on a one-GPU machine) would fail deep inside nccl at DDP's first broadcast. The GPUs' UUIDs,
        gathered over gloo, find it first; every worker sees the same list, so all decide alike."""
        everyone: list = [None] * self.world
        dist.all_gather_object(everyone, str(torch.cuda.get_device_properties(device).uuid))
        shared = [r for r, uuid in enumerate(everyone) if everyone.count(uuid) > 1]
        if not shared:
            return device
        if fallback:
            log.warning("train.device = 'auto': workers %s would share a GPU (nccl needs one each); training on "
                        "the CPU over gloo", shared)
            return torch.device("cpu")
        raise ValueError(f"train.device = 'cuda': workers {shared} would share a GPU, and nccl needs one GPU per "
                         f"worker; start at most {torch.cuda.device_count()} workers per host (the GPUs it sees), "
                         "or set train.device = 'cpu' (or 'auto', which then trains on the CPU)")

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def wrap(self, model: nn.Module) -> nn.Module:
        """DDP that sums the workers' gradients (each worker's loss is its share of the global mean)."""
        if self.world == 1:
            return model
        cuda = self.device.type == "cuda"
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[self.device.index] if cuda else None)
        ddp.register_comm_hook(None, _sum_hook)
        return ddp

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def sum(self, *values: float) -> list[float]:
        if self.world == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t)
        return t.tolist()

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every worker's ``t`` (1-d, any length), concatenated in rank order, on every worker."""
        if self.world == 1:
            return t
        parts = [None] * self.world
        dist.all_gather_object(parts, t)
        return torch.cat(parts)

    def from_leader(self, read):
        """``read()`` run on worker 0 alone, its value (or its error, raised) on every worker: what
        only worker 0's run directory holds (``leader_reads.py``). Every worker calls it."""
        if self.world == 1:
            return read()

        def receive():
            box = [None]
            dist.broadcast_object_list(box, src=0)
            return box[0]

        return leader_reads.handed(read, self.leader, lambda message: dist.broadcast_object_list([message], src=0),
                                   receive)

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _sum_hook(state, bucket):
    """DDP communication hook: all-reduce a bucket of gradients as a sum (the default averages)."""
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])
