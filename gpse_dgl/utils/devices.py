"""The one place that decides whether a device name is valid and present on this machine.

:func:`check_device_name` is the syntax check used by recipe schemas (no torch import);
:func:`resolve_device` turns a name into a ``torch.device`` that exists here, ``auto`` picking CUDA when
available. Both raise :class:`DeviceError` (a one-line usage error) with the same wording everywhere:
the CLI's ``--device`` of every verb and the recipes' ``device`` keys.

Example
-------
>>> from gpse_dgl.utils.devices import check_device_name, resolve_device
>>> check_device_name("cuda:1") is None, check_device_name("gpu")
(True, "expected auto, cpu, cuda, cuda:N or mps, got 'gpu'")
>>> resolve_device("cpu")
device(type='cpu')
"""
from __future__ import annotations

import re

from .errors import GPSEError

__all__ = ["DeviceError", "DEVICE_CHOICES", "check_device_name", "resolve_device"]

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N or mps"
_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


class DeviceError(GPSEError, ValueError):
    """A device name that is malformed or not present on this machine."""


def check_device_name(name) -> str | None:
    """None when ``name`` is a device name gpse-dgl accepts, else the reason (no availability check)."""
    if isinstance(name, str) and _PATTERN.fullmatch(name):
        return None
    return f"expected {DEVICE_CHOICES}, got {name!r}"


def resolve_device(name: str, where: str = "--device"):
    """``torch.device`` for ``name`` (``auto``: cuda when available, else cpu), present on this machine."""
    import torch  # here only: name checks (recipes, CLI options) run without importing torch

    problem = check_device_name(name)
    if problem:
        raise DeviceError(f"{where}: {problem}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"{where}: {name} requested but CUDA is not available here (use cpu or auto)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(f"{where}: {name} requested but this machine has "
                              f"{torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise DeviceError(f"{where}: {name} requested but MPS is not available here (use cpu or auto)")
    return device
