"""Checkpoints that are safe to load: plain containers and tensors only, written atomically.

A checkpoint is a ``dict`` of str keys holding tensors, numbers, strings, lists and dicts, nothing else:
``torch.load(path, weights_only=True)`` (which refuses arbitrary pickled objects, so loading a file
from someone else cannot run code) reads it, and :func:`load_checkpoint` never loads any other way.

Writes go through :func:`gpse_dgl.utils.io.atomic_path` (temporary file in the same directory, fsync,
``os.replace``, the umask's file mode), so a run killed while saving leaves the previous checkpoint intact,
never a torn file. Loading refuses checkpoints holding NaN or Inf in any floating-point tensor.

Both :mod:`gpse_dgl.encode` (loading encoders) and :mod:`gpse_dgl.train` (writing and resuming runs) use
this module, which depends on nothing but torch and :mod:`gpse_dgl.utils`.

Pretraining checkpoints (``train.pretraining``) hold::

    format, format_version          "gpse-dgl-pretrain", 1
    model_state                     GPSEForPretraining.state_dict()
    model_config                    keyword arguments that rebuild the model
    optimizer_state, scheduler_state
    rng_state                       {"torch": uint8 tensor, "numpy": {...}, "python": [...]}
    recipe                          the validated recipe (plain dict)
    epoch                           number of completed epochs
    best_metric, best_epoch         validation R^2 of the best epoch so far
    history                         per-epoch metrics (list of dicts)
    node_targets, graph_targets     PSE names the heads predict, in order
"""
from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch

from .errors import CheckpointError
from .io import atomic_path
from .text import first_line

__all__ = ["FORMAT", "FORMAT_VERSION", "save_checkpoint", "load_checkpoint", "load_pretrain_checkpoint",
           "export_inference_checkpoint", "first_non_finite", "capture_rng_state", "restore_rng_state"]

FORMAT = "gpse-dgl-pretrain"
FORMAT_VERSION = 1


def save_checkpoint(path: str | os.PathLike, payload: dict) -> Path:
    """Write ``payload`` to ``path`` atomically (temporary file + ``os.replace``); return the path.

    ``payload`` must hold only what ``weights_only=True`` can read back; this is checked before
    anything is written, so a bad payload cannot leave a checkpoint nobody can load.
    """
    path = Path(path)
    _check_plain(payload, "checkpoint")
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu",
                    required: Iterable[str] = ()) -> dict:
    """Read a checkpoint with ``torch.load(weights_only=True)``.

    Raises :class:`CheckpointError` (one line) when the file is missing, is not a torch file, holds
    anything but plain containers and tensors, is not a dict, lacks a key in ``required``, or holds a
    floating-point tensor with NaN or Inf values.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: checkpoint not found")
    if path.is_dir():
        raise CheckpointError(f"{path}: is a directory, expected a checkpoint file")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - the unpickler fails in many ways on foreign bytes
        if "weights only load failed" in str(exc).lower():  # an object that would run code to load
            raise CheckpointError(f"{path}: refused: it holds Python objects that only an unsafe load could "
                                  f"restore ({_refused_object(exc)}); gpse-dgl loads tensors and plain "
                                  f"containers only") from None
        raise CheckpointError(f"{path}: not a readable checkpoint ({first_line(exc)})") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: not a checkpoint (holds a {type(payload).__name__}, "
                              f"expected a dict)")
    missing = [key for key in required if key not in payload]
    if missing:
        raise CheckpointError(f"{path}: not a gpse-dgl checkpoint (missing {', '.join(missing)})")
    bad = first_non_finite(payload)
    if bad is not None:
        raise CheckpointError(f"{path}: tensor {bad!r} holds NaN or Inf values (a diverged or damaged "
                              f"model); use an earlier checkpoint")
    return payload


def first_non_finite(value: Any, where: str = "") -> str | None:
    """Dotted name of the first floating-point tensor in ``value`` (nested dicts/lists) with NaN or Inf."""
    if isinstance(value, torch.Tensor):
        if (value.is_floating_point() or value.is_complex()) and not bool(torch.isfinite(value).all()):
            return where or "<tensor>"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = first_non_finite(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def _refused_object(exc: BaseException) -> str:
    """What torch's weights-only unpickler refused, e.g. ``global posix.system``."""
    match = re.search(r"GLOBAL ([\w.]*\w)", str(exc))
    if match:
        return f"global {match.group(1)}"
    match = re.search(r"Unsupported operand \d+", str(exc))
    return match.group(0) if match else "an object outside the allowed types"


def load_pretrain_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """:func:`load_checkpoint` for a pretraining checkpoint, checking its format tag."""
    payload = load_checkpoint(path, map_location, required=("format", "model_state", "model_config"))
    if payload["format"] != FORMAT:
        raise CheckpointError(f"{path}: not a gpse-dgl pretraining checkpoint "
                              f"(format {payload['format']!r})")
    if int(payload.get("format_version", 0)) > FORMAT_VERSION:
        raise CheckpointError(f"{path}: written by a newer gpse-dgl (format version "
                              f"{payload['format_version']}); upgrade gpse-dgl to read it")
    return payload


def export_inference_checkpoint(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Write a small copy of pretraining checkpoint ``src`` for inference only.

    Keeps the format tag, ``model_state``, ``model_config``, the target names and the training statistics
    of the graph targets (``graph_target_scaling``), the recipe and the best epoch's metrics (provenance);
    drops the optimiser, scheduler and RNG states, which are only needed to resume training. This is how
    ``gpse_dgl/assets/gpse_quickstart.pt`` is made::

        python -c "from gpse_dgl.utils.checkpoint import export_inference_checkpoint as e; \\
                   e('runs/quickstart/best.pt', 'gpse_dgl/assets/gpse_quickstart.pt')"
    """
    payload = load_pretrain_checkpoint(src)
    # graph_target_scaling: the training statistics that map standardised graph outputs back to raw values
    keep = ("format", "format_version", "model_state", "model_config", "node_targets", "graph_targets",
            "graph_target_scaling", "recipe", "epoch", "best_metric", "best_epoch")
    small = {key: payload[key] for key in keep if key in payload}
    history = payload.get("history") or []
    best = [h for h in history if h.get("epoch") == payload.get("best_epoch")]
    if best:
        small["best_epoch_metrics"] = best[-1]
    return save_checkpoint(dst, small)


# ----------------------------------------------------------------------------------------------
# random number generator states as plain containers


def capture_rng_state() -> dict:
    """States of torch (CPU and CUDA), numpy and python's ``random``, as tensors and lists."""
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"name": np_name, "keys": torch.from_numpy(np_keys.astype(np.int64)),
                  "pos": int(np_pos), "has_gauss": int(np_has_gauss), "cached_gaussian": float(np_gauss)},
        "python": [py_version, list(py_internal), py_gauss],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """Inverse of :func:`capture_rng_state`."""
    torch.set_rng_state(state["torch"].cpu())
    np_state = state["numpy"]
    np.random.set_state((np_state["name"], np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["cached_gaussian"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


# ----------------------------------------------------------------------------------------------


_PLAIN_SCALARS = (str, int, float, bool, type(None), torch.dtype, torch.device, torch.Size)


def _check_plain(value: Any, where: str) -> None:
    """Refuse anything ``torch.load(weights_only=True)`` could not read back."""
    if isinstance(value, (torch.Tensor, *_PLAIN_SCALARS)):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{where}: key {key!r} is a {type(key).__name__}, not str or int")
            _check_plain(item, f"{where}.{key}")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_plain(item, f"{where}[{index}]")
        return
    raise TypeError(f"{where}: a {type(value).__name__} cannot be stored in a weights-only checkpoint")


