"""Process groups under ``torchrun``: joining, the backend, a stated timeout, rank-0 writing, gathers.

One process is the default and needs nothing from this module. ``torchrun`` (or any launcher that sets
``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``) starts ``WORLD_SIZE`` copies of a
command; :func:`process_group` joins them into one ``torch.distributed`` group for the block it guards:

* backend ``gloo`` on CPU and ``nccl`` on CUDA, chosen from the device (``"auto"``) or named;
  ``nccl`` without CUDA is a one-line :class:`DistributedError`;
* every collective waits at most :func:`timeout_seconds` (``GPSE_DGL_DIST_TIMEOUT``, default
  :data:`DEFAULT_TIMEOUT_SECONDS`); a process that dies or stops answering makes the others fail their
  next collective (at once when its connection closes, else after the timeout) and they end with one
  line ``rank R: lost contact with the other processes ...`` instead of hanging;
* :attr:`Context.is_main` (rank 0) alone writes files; :func:`gather_rows` and :func:`gather_objects`
  bring every rank's share together in rank order.

Example (one process: nothing is joined, the context says world size 1)
-----------------------------------------------------------------------
>>> with process_group("auto") as ctx:
...     (ctx.rank, ctx.world_size, ctx.is_main)
(0, 1, True)
>>> shard_range(10, rank=1, world_size=3)
(4, 7)
"""
from __future__ import annotations

import contextlib
import datetime
import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .errors import GPSEError
from .text import first_line
from .torchrun_env import DistributedError, launched_world_size, refuse_under_torchrun

__all__ = ["DistributedError", "Context", "process_group", "current", "launched_world_size",
           "choose_backend", "timeout_seconds", "shard_range", "per_rank_batch_size", "gather_rows",
           "gather_objects", "broadcast_object", "barrier", "refuse_under_torchrun", "local_device", "leave_group",
           "BACKENDS", "DEFAULT_TIMEOUT_SECONDS", "TIMEOUT_ENV"]

BACKENDS = ("auto", "gloo", "nccl")
DEFAULT_TIMEOUT_SECONDS = 300
TIMEOUT_ENV = "GPSE_DGL_DIST_TIMEOUT"
# what gloo / nccl / the TCP store put in the RuntimeError of a failed collective
_LOST_CONTACT_MARKERS = ("gloo", "nccl", "connection closed", "connection reset", "timed out", "timeout",
                         "broken pipe", "socket", "peer")


@dataclass(frozen=True)
class Context:
    """Where this process stands in the group (world size 1 without ``torchrun``)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and logs."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def current() -> Context:
    """The context of the joined group, or world size 1 when none is joined."""
    if not (dist.is_available() and dist.is_initialized()):
        return Context()
    return Context(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)),
                   dist.get_backend())


def timeout_seconds() -> float:
    """Seconds a collective waits for the other processes (``GPSE_DGL_DIST_TIMEOUT``, default 300)."""
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return float(DEFAULT_TIMEOUT_SECONDS)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise DistributedError(f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds")
    return value


def choose_backend(requested: str, device: torch.device | str | None) -> str:
    """``"auto"`` -> ``nccl`` for CUDA devices, else ``gloo``; ``nccl`` needs CUDA."""
    if requested not in BACKENDS:
        raise DistributedError(f"general_pipeline.distributed: expected one of {', '.join(BACKENDS)}, "
                               f"got {requested!r}")
    on_cuda = device is not None and torch.device(device).type == "cuda"
    if requested == "auto":
        return "nccl" if on_cuda else "gloo"
    if requested == "nccl" and not (on_cuda and torch.cuda.is_available()):
        raise DistributedError("general_pipeline.distributed: nccl needs CUDA devices (this process "
                               "trains on " + (str(device) if device is not None else "cpu")
                               + "); use gloo or auto on CPUs")
    return requested


def local_device(device: torch.device, ctx: Context) -> torch.device:
    """``cuda`` without an index becomes ``cuda:LOCAL_RANK`` under torchrun (one GPU per process)."""
    if ctx.is_distributed and device.type == "cuda" and device.index is None:
        return torch.device("cuda", ctx.local_rank)
    return device


@contextlib.contextmanager
def process_group(requested: str = "auto", device: torch.device | str | None = None):
    """Join the ``torchrun`` processes for the block; yield its :class:`Context`.

    Without ``torchrun`` (``WORLD_SIZE`` unset or 1), or inside a group joined already, nothing is
    joined or left. A failed collective inside the block becomes a one-line :class:`DistributedError`.
    """
    world_size = launched_world_size()
    if world_size <= 1 or dist.is_initialized():
        yield current()
        return
    backend = choose_backend(requested, device)
    seconds = timeout_seconds()
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=seconds))
    except (RuntimeError, ValueError) as exc:
        raise DistributedError(f"cannot join the {world_size} torchrun processes with {backend} within "
                               f"{seconds:g} s ({first_line(exc, limit=200)})") from None
    ctx = current()
    try:
        yield ctx
    except RuntimeError as exc:
        if isinstance(exc, GPSEError) or not _lost_contact(exc):
            raise
        raise DistributedError(f"rank {ctx.rank}: lost contact with the other processes (one died or did "
                               f"not answer within {seconds:g} s): {first_line(exc, limit=200)}") from None
    finally:
        with contextlib.suppress(Exception):
            leave_group()


def leave_group() -> None:
    """Leave the default group with its worker threads stopped while the interpreter is fully alive.

    ``destroy_process_group`` drops torch's own references only: a DDP reducer keeps the gloo group alive
    from inside a reference cycle, so without a collection here the group (and the worker thread still
    releasing its last collective) would be freed during interpreter shutdown, where that release takes the
    GIL and aborts the process ("terminate called without an active exception": pytorch/pytorch#190489;
    8 of 92 two-process trainings on a 2-core host).
    """
    gc.collect()
    dist.destroy_process_group()


def _lost_contact(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in _LOST_CONTACT_MARKERS)


def shard_range(count: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s contiguous share of ``count`` items (sizes differ by <= 1,
    the first ``count % world_size`` ranks take one more)."""
    base, extra = divmod(count, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def per_rank_batch_size(global_batch: int, world_size: int, key: str = "general_pipeline.batch_size") -> int:
    """``global_batch / world_size``; a one-line error when the world size does not divide it."""
    if global_batch % world_size:
        raise DistributedError(f"{key}: the global batch of {global_batch} graphs does not divide among "
                               f"{world_size} processes; choose a multiple of {world_size} or another "
                               f"--nproc_per_node")
    return global_batch // world_size


def barrier() -> None:
    """Wait for every rank (nothing with one process)."""
    if current().is_distributed:
        dist.barrier()


def gather_rows(local: torch.Tensor) -> torch.Tensor:
    """Every rank's ``local`` rows concatenated in rank order (row counts may differ between ranks).

    The result is the same on every rank; gradients flow into this rank's own rows only (the others'
    are constants here: each rank back-propagates through its own share).
    """
    ctx = current()
    if not ctx.is_distributed:
        return local
    count = torch.tensor([local.shape[0]], dtype=torch.int64, device=local.device)
    counts = [torch.empty_like(count) for _ in range(ctx.world_size)]
    dist.all_gather(counts, count)
    counts = [int(c) for c in counts]
    width = max(counts)
    padded = local.new_zeros((width, *local.shape[1:]))
    padded[:local.shape[0]] = local.detach()
    pieces = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(pieces, padded.contiguous())
    pieces = [piece[:count] for piece, count in zip(pieces, counts)]
    pieces[ctx.rank] = local
    return torch.cat(pieces)


def gather_objects(value) -> list:
    """``[value of rank 0, value of rank 1, ...]`` on every rank (``[value]`` with one process)."""
    ctx = current()
    if not ctx.is_distributed:
        return [value]
    out = [None] * ctx.world_size
    dist.all_gather_object(out, value)
    return out


def broadcast_object(value, source: int = 0):
    """Rank ``source``'s ``value`` on every rank."""
    if not current().is_distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=source)
    return box[0]
