"""Small run-time helpers shared by the pretraining and downstream training loops.

Devices, seeds, thread counts, progress output and JSON files: nothing here knows about models.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import zlib

import numpy as np
import torch
from tqdm.auto import tqdm

from ..utils import devices
from ..utils.io import atomic_write_text
from ..utils.progress import progress
from ..utils.text import first_line

__all__ = ["resolve_device", "derive_seed", "torch_threads", "progress_bar", "tqdm_write", "first_line",
           "json_safe", "write_json"]


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> cuda when available, else cpu; other names are checked to exist
    (:func:`gpse_dgl.utils.devices.resolve_device` for the recipe's ``device`` key)."""
    return devices.resolve_device(name, where="device")


def derive_seed(seed: int, *keys) -> int:
    """A 63-bit seed determined by ``seed`` and ``keys`` (ints or strings), independent streams."""
    words = [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF]
    words += [zlib.crc32(str(k).encode()) if not isinstance(k, int) else k & 0xFFFFFFFF for k in keys]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))


@contextlib.contextmanager
def torch_threads(num_threads: int | None):
    """Run the block with ``num_threads`` torch CPU threads (``None``: leave the setting alone)."""
    if num_threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


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
