"""Small run-time helpers shared by the pretraining and downstream training loops.

Devices, seeds, thread counts, progress output and JSON files: nothing here knows about models.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import sys
import zlib

import numpy as np
import scipy
import torch
from tqdm.auto import tqdm

from .. import __version__ as gpse_version, _env  # noqa: F401  (_env before dgl)
import dgl

from .. import kernels
from ..utils import devices
from ..utils.io import atomic_write_text
from ..utils.precision import Precision
from ..utils.progress import progress

__all__ = ["resolve_device", "derive_seed", "torch_threads", "fit_threads", "thread_share", "run_environment",
           "progress_bar", "tqdm_write", "json_safe", "write_json"]


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> cuda when available, else cpu; other names are checked to exist
    (:func:`gpse_dgl.utils.devices.resolve_device` for the recipe's ``device`` key)."""
    return devices.resolve_device(name, where="device")


def derive_seed(seed: int, *keys) -> int:
    """A 63-bit seed determined by ``seed`` and ``keys`` (ints or strings), independent streams."""
    words = [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF]
    words += [zlib.crc32(str(k).encode()) if not isinstance(k, int) else k & 0xFFFFFFFF for k in keys]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))


def machine_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity outside Linux
        return max(1, os.cpu_count() or 1)


def local_processes() -> int:
    """Processes ``torchrun`` started on this machine (``LOCAL_WORLD_SIZE``; 1 without torchrun)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def thread_share() -> int:
    """This process's share of the cores: cores / processes on this machine, at least 1."""
    return max(1, machine_cores() // local_processes())


def fit_threads(requested: int | None) -> tuple[int | None, str | None]:
    """``(threads to use, a line for the log or None)`` for a recipe's ``num_threads``.

    Under torchrun each process defaults to its share of the cores (:func:`thread_share`): torch's own
    default there is ``OMP_NUM_THREADS`` (torchrun sets 1), and a recipe's count, written for one
    process, would make the processes fight over the cores (2 processes x 2 threads on 2 cores: each
    epoch 17x slower). A request above the share is lowered to it, with one line saying so. One process
    without a request keeps torch's default (``None``).
    """
    share, processes = thread_share(), local_processes()
    if requested is None:
        return (share if processes > 1 else None), None
    if requested <= share:
        return requested, None
    where = f"{processes} processes on {machine_cores()} cores" if processes > 1 else f"{machine_cores()} cores"
    return share, (f"threads: general_pipeline.num_threads asks for {requested}; using {share}, this process's "
                   f"share of the machine ({where})")


@contextlib.contextmanager
def torch_threads(num_threads: int | None, log=None):
    """Run the block with the torch CPU threads :func:`fit_threads` gives for ``num_threads`` (``None``
    in one process: leave the setting alone); ``log`` receives its line, if any."""
    num_threads, note = fit_threads(num_threads)
    if note and log is not None:
        log(note)
    if num_threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def run_environment(ctx, device, precision: Precision, requested_threads: int | None) -> dict:
    """How a run ran, for ``metrics.json`` / ``results.json``: processes, backend, device, precision (as
    decided: name, dtype, autocast, why), threads, the CPU, each op's kernel path and the versions of what
    computed it."""
    device = torch.device(device)
    record = {"world_size": ctx.world_size, "backend": ctx.backend, "local_processes": local_processes(),
              "device": str(device), "precision": precision.record(), "threads": torch.get_num_threads(),
              "threads_requested": requested_threads, "cpu_cores": machine_cores(), "cpu_model": cpu_model(),
              "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if device.type == "cuda":
        record["device_name"] = torch.cuda.get_device_name(device)
    # the path each op took (dgl, fused-cpu, triton, torch) and the state of the device's kernels
    record["kernels"] = {"paths": kernels.paths(device), "state": kernels.describe(device)}
    record["versions"] = {"gpse_dgl": gpse_version, "python": platform.python_version(),
                          "torch": torch.__version__, "dgl": dgl.__version__, "numpy": np.__version__,
                          "scipy": scipy.__version__}
    return record


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` knows elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def progress_bar(iterable, enabled: bool, **kwargs):
    """:func:`gpse_dgl.utils.progress.progress` over ``iterable`` (a bar on a terminal, else a few lines)."""
    return progress(iterable, enabled=enabled, **kwargs)


def tqdm_write(message: str) -> None:
    """Print a line without breaking an active progress bar (flushed: a log file shows it at once)."""
    tqdm.write(message)
    sys.stdout.flush()


def json_safe(value):
    """NaN/inf -> None, tensors and tuples -> lists, numpy scalars -> Python; int keys are kept.

    The result is valid strict JSON and loads under ``torch.load(weights_only=True)``.
    """
    if isinstance(value, dict):
        return {k if isinstance(k, int) else str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, torch.Tensor):
        return json_safe(value.tolist())
    if isinstance(value, (np.floating, np.integer)):
        return json_safe(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | os.PathLike, value) -> None:
    """Write ``json_safe(value)`` to ``path`` atomically (:func:`gpse_dgl.utils.io.atomic_write_text`)."""
    atomic_write_text(path, json.dumps(json_safe(value), indent=1, allow_nan=False))
