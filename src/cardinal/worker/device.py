"""A worker on a device: which device (``train.device``), and host arrays staged onto it.

Dedup stays on the CPU (unique ids, inverse index); only what the device computes with
crosses: one row per unique id, the inverse index and bag offsets, the dense features and
labels. ``DeviceRows`` does the crossing so the collection and the trainer stay small:

    staging = DeviceRows(torch.device("cuda"))
    rows = staging.stage("rows:items", pulled)     # Staged: the copy is under way
    ...                                            # (the current step's kernels run meanwhile)
    rows.get()                                     # the compute stream waits for the copy, then uses it

On CUDA each key has a ring of ``slots`` pinned host buffers, reused across steps and grown
(doubling) when an array outgrows them; the array is copied into one, then to the device
with a non-blocking copy on a side stream, and an event marks the copy's end. ``get()``
makes the compute stream wait for that event (a wait on the GPU, not the host), so copies
staged while a step runs overlap it. Before a buffer is written again, the host waits for
its previous copy's event (two steps old: done). With ``staged=False`` (the CPU default)
nothing is copied: the tensor is the array (``torch.from_numpy``), exactly today's path.
``staged=True`` on the CPU runs the same bookkeeping with a clone for the copy (tests).

A tensor already on the device (a row source that keeps rows there, e.g. a GPU cache) is
taken as it is: no copy, no bytes counted.
"""

import logging
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

DEVICES = ("cpu", "cuda", "auto")
log = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    """``train.device``: "auto" is cuda when torch sees a GPU that runs a kernel, else cpu. A worker
    started by torchrun uses GPU LOCAL_RANK (modulo the GPUs it sees: one each, under SLURM)."""
    if name not in DEVICES:
        raise ValueError(f"train.device must be one of {list(DEVICES)}, got {name!r}")
    has_cuda = torch.cuda.is_available()
    if name == "cuda" and not has_cuda:
        raise ValueError("train.device = 'cuda', but torch sees no CUDA device (torch.cuda.is_available() is "
                         "False); set train.device = 'cpu' or 'auto', or install a CUDA build of torch")
    if name == "cpu" or not has_cuda:
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    failure = cuda_failure(device)
    if failure is None:
        return device
    if name == "auto":
        log.warning("train.device = 'auto': %s is present but fails (%s); training on the CPU", device, failure)
        return torch.device("cpu")
    raise ValueError(f"train.device = 'cuda', but {device} is present and fails ({failure}); fix the driver or "
                     "the torch build, or set train.device = 'cpu' (or 'auto', which falls back to the CPU)")


def cuda_failure(device: torch.device) -> str | None:
    """Why ``device`` cannot run a kernel and copy back (None: it can). ``is_available()`` only
    counts devices: a driver too old for the torch build, a GPU without kernels for its
    architecture, or an exclusive-mode GPU taken by another process fail at the first kernel."""
    try:
        (torch.ones(1, device=device) + 1).cpu()
    except Exception as e:  # noqa: BLE001 - any failure means the device is unusable; it is reported
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    return None


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """``dtype`` as numpy's. The fill into a pinned buffer is numpy's copy, not torch's: torch's
    CPU copy (a cast) runs on its intra-op threads, and with the embedded servers' kernels busy on
    the same cores its parallel region waits for descheduled threads (milliseconds a call, measured
    on 16 cores); a single-threaded memcpy of a few MB takes well under one."""
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError as e:  # bfloat16 and friends: numpy has no such type
        raise ValueError(f"cannot stage as {dtype}: numpy has no such dtype") from e


def staging_for(device: torch.device) -> "DeviceRows | None":
    """The trainer's staging: copies onto a CUDA device; none on the CPU (the rows are used where
    they were pulled, bit for bit today's path)."""
    return DeviceRows(device) if device.type == "cuda" else None


@dataclass
class _Buffer:
    data: torch.Tensor                     # (capacity,) uint8, pinned on CUDA
    event: "torch.cuda.Event | None" = None  # the end of the last copy out of it


class Staged:
    """A tensor on the device; ``get()`` gives it once the compute stream may use it."""

    def __init__(self, tensor: torch.Tensor, event=None, owner: "DeviceRows | None" = None):
        self.tensor, self._event, self._owner = tensor, event, owner

    def get(self) -> torch.Tensor:
        if self._event is not None:  # CUDA only: order the compute stream after the copy, timing its wait
            compute = torch.cuda.current_stream(self.tensor.device)
            before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            before.record(compute)
            compute.wait_event(self._event)
            after.record(compute)
            self._owner._waits.append((before, after))
            self.tensor.record_stream(compute)  # made on the side stream, used on this one
            self._event = None
        return self.tensor


class DeviceRows:
    """Stages host arrays onto ``device``; counts bytes copied and buffers grown or reused."""

    def __init__(self, device: torch.device, staged: bool | None = None, slots: int = 2):
        if slots < 2:
            raise ValueError(f"slots must be >= 2 (one being filled while one is copied), got {slots}")
        device = torch.device(device)
        self.cuda = device.type == "cuda"
        if self.cuda and device.index is None:  # "cuda" is the current one: named, so tensors there compare equal
            device = torch.device("cuda", torch.cuda.current_device())
        self.device, self.slots = device, slots
        self.staged = self.cuda if staged is None else staged
        if self.cuda and not self.staged:
            raise ValueError("a CUDA device needs staged copies (staged=True or None)")
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self._rings: dict[str, list[_Buffer | None]] = {}
        self._turn: dict[str, int] = {}
        self._waits: list = []   # (before, after) CUDA events around each compute-stream wait
        self.h2d_bytes, self.grown, self.reused = 0, 0, 0
        # host seconds in stage(), by part: waiting for a slot's last copy, pinning new buffers,
        # filling them, starting the copies (benchmarks/step_profile.py reports them)
        self.seconds = {"slot_wait": 0.0, "grow": 0.0, "fill": 0.0, "launch": 0.0}

    def stage(self, key: str, value: np.ndarray | torch.Tensor, dtype: torch.dtype | None = None) -> Staged:
        """``value`` on the device (a copy started, unless it is there already or nothing is staged),
        as ``dtype`` when given: the cast is done by the copy into the pinned buffer, so an int64
        index crosses as int32 in half the bytes at no extra pass."""
        if isinstance(value, torch.Tensor):
            if value.device == self.device:
                return Staged(value)
            value = value.detach().cpu().numpy()
        array = np.ascontiguousarray(value)
        if not self.staged:
            return Staged(torch.from_numpy(array))
        target = array.dtype if dtype is None else _numpy_dtype(dtype)
        nbytes = array.size * target.itemsize
        buf = self._buffer(key, nbytes)
        start = time.perf_counter()
        host = buf.data[:nbytes].numpy().view(target).reshape(array.shape)
        np.copyto(host, array, casting="unsafe")  # numpy's copy (and cast), on this thread: see _numpy_dtype
        self.seconds["fill"] += time.perf_counter() - start
        self.h2d_bytes += nbytes
        if not self.cuda:
            return Staged(torch.from_numpy(host).clone())  # the CPU stand-in for the copy: a tensor of its own
        start = time.perf_counter()
        with torch.cuda.stream(self.stream):
            out = torch.from_numpy(host).to(self.device, non_blocking=True)
        buf.event = torch.cuda.Event()
        buf.event.record(self.stream)
        self.seconds["launch"] += time.perf_counter() - start
        return Staged(out, buf.event, self)

    def _buffer(self, key: str, nbytes: int) -> _Buffer:
        """The key's next buffer in its ring, free to overwrite, with room for ``nbytes``."""
        ring = self._rings.setdefault(key, [None] * self.slots)
        i = self._turn[key] = (self._turn.get(key, -1) + 1) % self.slots
        buf = ring[i]
        start = time.perf_counter()
        if buf is not None and buf.event is not None:
            buf.event.synchronize()  # its last copy has read it (steps ago: returns at once)
        self.seconds["slot_wait"] += time.perf_counter() - start
        if buf is None or buf.data.numel() < nbytes:
            start = time.perf_counter()
            capacity = max(nbytes, 2 * (buf.data.numel() if buf is not None else 0), 4096)
            buf = ring[i] = _Buffer(torch.empty(capacity, dtype=torch.uint8, pin_memory=self.cuda))
            self.grown += 1
            self.seconds["grow"] += time.perf_counter() - start
        else:
            self.reused += 1
        return buf

    def wait_seconds(self) -> float:
        """Seconds the compute stream waited for copies since the last call (CUDA; 0 elsewhere).
        Synchronises on the newest wait: call it between steps (the trainer does, at log lines)."""
        if not self._waits:
            return 0.0
        self._waits[-1][1].synchronize()
        total = sum(before.elapsed_time(after) for before, after in self._waits) / 1000
        self._waits.clear()
        return total


class DeviceBatches:
    """A batch's dense features and labels on the device, staged ahead for the next batch."""

    def __init__(self, staging: DeviceRows):
        self.staging = staging
        self._ahead: tuple[object, Staged, Staged] | None = None  # the batch itself: an id() can be reused

    def _copy(self, batch) -> tuple[Staged, Staged]:
        """A reader's tensors are host data (on the CPU): staged as arrays, so the CPU stand-in copies them too."""
        host = [t.numpy() if t.device.type == "cpu" else t for t in (batch.dense, batch.labels)]
        return self.staging.stage("dense", host[0]), self.staging.stage("labels", host[1])

    def stage(self, batch) -> None:
        """Start the copies of ``batch`` (the next one) while the current step runs."""
        self._ahead = (batch, *self._copy(batch))

    def get(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(dense, labels) of ``batch`` on the device."""
        if self._ahead is not None and self._ahead[0] is batch:
            _, dense, labels = self._ahead
        else:
            dense, labels = self._copy(batch)
        self._ahead = None
        return dense.get(), labels.get()


def to_host(t: torch.Tensor) -> np.ndarray:
    """``t`` as a float32 array on the host (a row gradient for the push). From CUDA: copied into
    pinned memory (a fresh block of torch's caching host allocator, so a push still in flight
    keeps its own) without blocking, then one wait on the stream: a pageable ``.cpu()`` goes
    through the driver's bounce buffer at a fraction of the bandwidth. Elsewhere: ``.numpy()``."""
    if t.device.type != "cuda":
        return np.ascontiguousarray(t.detach().to("cpu", torch.float32).numpy(), dtype=np.float32)
    host = torch.empty(t.shape, dtype=torch.float32, pin_memory=True)
    host.copy_(t.detach(), non_blocking=True)
    torch.cuda.current_stream(t.device).synchronize()  # the push needs the values: the step's one sync
    return host.numpy()


def host_value(t: torch.Tensor):
    """A function giving ``t``'s value (a scalar) on the host. On CUDA the copy is queued now
    (pinned, non-blocking) and read later, after the step's pushes have synchronised the stream,
    so reading it adds no wait of its own; elsewhere it is ``t.item()``."""
    if t.device.type != "cuda":
        return t.item
    host = torch.empty((), dtype=t.dtype, pin_memory=True)
    host.copy_(t.detach(), non_blocking=True)
    done = torch.cuda.Event()
    done.record()

    def read() -> float:
        done.synchronize()
        return host.item()
    return read
