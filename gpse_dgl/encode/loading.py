"""Load a pretrained GPSE encoder from our checkpoints, the authors' published files, or the shipped default.

Formats are recognised from the content, never from the file name:

``gpse-dgl``
    What ``gpse-dgl pretrain`` writes (:mod:`gpse_dgl.utils.checkpoint`): ``model_state`` (state dict of
    :class:`~gpse_dgl.nn.gpse.GPSEForPretraining`, keys ``encoder.*`` / ``heads.*``, or of a bare
    :class:`~gpse_dgl.nn.gpse.GPSE`) and ``model_config`` (``GPSEForPretraining.to_config()`` or the flat
    encoder keyword arguments). ``state_dict`` / ``config`` are accepted as synonyms.
``authors``
    The authors' files (Zenodo record 8145095, ``gpse_model_<name>_1.0.pt``) and any PyG ``GPSE``
    state saved as ``{"model_state": {"model." + key: tensor}}``; converted by
    :mod:`gpse_dgl.nn.pyg_compat`. Optimiser and scheduler states in the file are ignored.

Every file is read with ``torch.load(weights_only=True)``, which refuses pickled code. Anything that is
not a GPSE checkpoint, a missing tensor or a tensor of the wrong shape raises
:class:`~gpse_dgl.utils.errors.CheckpointError` with one line naming the file and the tensor.

Example
-------
>>> import tempfile, os, torch
>>> from gpse_dgl.nn.gpse import GPSE
>>> from gpse_dgl.encode.loading import load_gpse
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.pt")
>>> enc = GPSE(dim_hidden=16, num_layers=2)
>>> torch.save({"model_state": enc.state_dict(), "model_config": enc.to_config()}, path)
>>> load_gpse(path).training                      # loaded in eval mode
False
"""
from __future__ import annotations

import logging
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import _env  # noqa: F401
from ..nn.gpse import GPSE
from ..nn.pyg_compat import authors_config, load_authors_state_dict
from ..utils.checkpoint import load_checkpoint
from ..utils.errors import CheckpointError
from .models import DEFAULT_MODEL, get_model, model_path, resolve_checkpoint

__all__ = ["CheckpointInfo", "default_checkpoint_path", "checkpoint_format",
           "load_gpse", "resolve_model", "describe_checkpoint"]

logger = logging.getLogger("gpse_dgl.encode")

_ENCODER_KEYS = ("dim_in", "dim_hidden", "num_layers", "dropout", "virtual_node")


@dataclass(frozen=True)
class CheckpointInfo:
    """Where a loaded encoder came from (attached to the model as ``model.checkpoint_info``)."""

    path: str
    format: str          # "gpse-dgl" or "authors"
    default: bool        # the checkpoint shipped with gpse-dgl
    name: str | None = None  # the registered model name it was asked for by (gpse_dgl.encode.models)

    def describe(self, model) -> str:
        """One line: file, registered name, format and size of the encoder."""
        params = sum(p.numel() for p in model.parameters())
        named = f"{self.name!r}, " if self.name else ""
        origin = f"shipped default {named}" if self.default else (f"registered model {named}" if named else "")
        fmt = "authors' format" if self.format == "authors" else "gpse-dgl format"
        return (f"{self.path} ({origin}{fmt}; {model.num_layers} layers x {model.dim_hidden}, "
                f"{params / 1e6:.1f}M parameters, virtual node {'on' if model.virtual_node else 'off'})")


def default_checkpoint_path() -> Path:
    """Path of the default model (registered as ``models.DEFAULT_MODEL``; it may be absent in a checkout)."""
    return model_path(get_model(DEFAULT_MODEL))


def _state_and_config(payload: dict) -> tuple[dict | None, dict | None]:
    state = payload.get("model_state", payload.get("state_dict"))
    config = payload.get("model_config", payload.get("config"))
    return (state if isinstance(state, dict) else None), (config if isinstance(config, dict) else None)


def checkpoint_format(payload) -> str | None:
    """``"authors"``, ``"gpse-dgl"`` or None (not a GPSE checkpoint) for a loaded checkpoint dict.

    Examples
    --------
    >>> import torch
    >>> checkpoint_format({"model_state": {"model.pre_mp.Layer_0.layer.model.weight": torch.zeros(2, 2)}})
    'authors'
    >>> checkpoint_format({"weights": torch.zeros(1)}) is None
    True
    """
    if not isinstance(payload, dict):
        return None
    state, _ = _state_and_config(payload)
    if not state:
        return None
    keys = list(state)
    if all(isinstance(k, str) and k.startswith("model.") for k in keys) and \
            "model.pre_mp.Layer_0.layer.model.weight" in state:
        return "authors"
    if "encoder.pre_linear.weight" in state or "pre_linear.weight" in state:
        return "gpse-dgl"
    return None


def _encoder_config(config: dict | None, state: dict) -> dict:
    """Encoder keyword arguments from a stored config (nested or flat), sizes checked against tensors."""
    if config and isinstance(config.get("encoder"), dict):
        config = config["encoder"]
    config = {k: v for k, v in (config or {}).items() if k in _ENCODER_KEYS}
    if "dim_in" not in config or "dim_hidden" not in config:
        weight = state["pre_linear.weight"]
        config.setdefault("dim_hidden", int(weight.shape[0]))
        config.setdefault("dim_in", int(weight.shape[1]))
    if "num_layers" not in config:
        config["num_layers"] = len({k.split(".")[1] for k in state if k.startswith("convs.")})
    return config


def _check_state(path, state: dict, model: torch.nn.Module) -> None:
    """One-line errors naming the first missing, unexpected or mis-shaped tensor."""
    expected = model.state_dict()
    for key, value in expected.items():
        if key not in state:
            raise CheckpointError(f"{path}: missing tensor {key!r} for a GPSE with {model.num_layers} layers "
                                  f"x {model.dim_hidden}")
        if not isinstance(state[key], torch.Tensor):
            raise CheckpointError(f"{path}: entry {key!r} is a {type(state[key]).__name__}, not a tensor")
        if tuple(state[key].shape) != tuple(value.shape):
            raise CheckpointError(f"{path}: tensor {key!r} has shape {tuple(state[key].shape)}, the model "
                                  f"expects {tuple(value.shape)}")
    for key in state:
        if key not in expected:
            raise CheckpointError(f"{path}: unexpected tensor {key!r} (the GPSE encoder has no such parameter)")


def _ours(path, payload: dict, backend):
    state, config = _state_and_config(payload)
    if any(k.startswith("encoder.") for k in state):
        state = {k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")}
    try:
        model = GPSE.from_config(_encoder_config(config, state), backend=backend)
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"{path}: bad model config ({exc})") from None
    _check_state(path, state, model)
    model.load_state_dict(state)
    return model


def _authors(path, payload: dict, backend):
    try:
        model = GPSE.from_config(authors_config(payload)["encoder"], backend=backend)
        state = load_authors_state_dict(payload, model=model)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    model.load_state_dict(state)
    return model


def _check_torch_file(path: Path) -> None:
    """Reject files ``torch.save`` cannot have written (zip archive, or legacy pickle) with a clear line."""
    if not path.is_file():
        return  # load_checkpoint reports missing files and directories
    with open(path, "rb") as fh:
        head = fh.read(4)
    if not (zipfile.is_zipfile(path) or head[:1] == b"\x80"):
        raise CheckpointError(f"{path}: not a GPSE checkpoint (not a file written by torch.save)")


def load_gpse(path: str | os.PathLike | None = None, device="cpu", backend: str | None = None):
    """A pretrained :class:`~gpse_dgl.nn.gpse.GPSE` encoder in eval mode, on ``device``.

    Parameters
    ----------
    path : str or PathLike, optional
        A gpse-dgl checkpoint (``best.pt`` of ``gpse-dgl pretrain``), an authors' file
        (``gpse_model_molpcba_1.0.pt``; the format is detected from the content), or a registered model
        name (``quickstart``, ``molpcba``, ...: :mod:`gpse_dgl.encode.models`). None: the default model
        shipped with gpse-dgl (:func:`default_checkpoint_path`); a log line says so.
    device : str or torch.device
        Where the encoder's parameters go.
    backend : str, optional
        Message-passing backend (see :mod:`gpse_dgl.nn.ops`); default automatic.

    Returns
    -------
    GPSE
        In eval mode, with ``model.checkpoint_info`` (:class:`CheckpointInfo`) set. Pretraining heads
        in the file are not loaded.

    Raises
    ------
    CheckpointError
        Missing or unreadable file, not a GPSE checkpoint, missing tensor or wrong shape, a registered
        model that is not downloaded (one line).
    UnknownModelError
        ``path`` is neither a file nor a registered name (the message lists the names).

    Examples
    --------
    >>> model = load_gpse("gpse_model_molpcba_1.0.pt")        # doctest: +SKIP
    >>> model = load_gpse()            # the shipped default model (rdkit-base)  # doctest: +SKIP
    """
    default, spec = path is None, None
    if default:
        path = default_checkpoint_path()
    else:
        path, spec = resolve_checkpoint(path)
    if default and not path.exists():
        raise CheckpointError(f"no checkpoint given and the shipped default {path} is missing; "
                              "pass --checkpoint PATH (a gpse-dgl best.pt or gpse_model_<name>_1.0.pt)")
    _check_torch_file(path)
    payload = load_checkpoint(path, map_location="cpu")
    fmt = checkpoint_format(payload)
    if fmt is None:
        raise CheckpointError(f"{path}: not a GPSE checkpoint (expected gpse-dgl's 'model_state' + "
                              "'model_config', or the authors' 'model_state' with 'model.' keys)")
    model = (_authors if fmt == "authors" else _ours)(path, payload, backend)
    model = model.to(device).eval()
    name = DEFAULT_MODEL if default else (spec.name if spec is not None else None)
    model.checkpoint_info = CheckpointInfo(str(path), fmt, default, name)
    message = f"GPSE encoder: {model.checkpoint_info.describe(model)}"
    if default:
        logger.warning("no checkpoint given, using the default model shipped with gpse-dgl: %s", message)
    else:
        logger.info(message)
    return model


def resolve_model(model, device=None):
    """A GPSE module from a module (moved to ``device`` when given), a checkpoint path or a registered name,
    or None (the shipped default model)."""
    if isinstance(model, torch.nn.Module):
        return model if device is None else model.to(device)
    return load_gpse(model, device=device or "cpu")


def describe_checkpoint(model) -> str:
    """One line describing where ``model`` was loaded from (or ``"unsaved model"``)."""
    info = getattr(model, "checkpoint_info", None)
    encoder = getattr(model, "encoder", model)
    if info is None:
        return f"in-memory GPSE ({encoder.num_layers} layers x {encoder.dim_hidden})"
    return info.describe(encoder)
