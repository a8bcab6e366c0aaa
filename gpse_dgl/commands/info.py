"""``gpse-dgl info``: versions, devices and which message-passing backend runs where."""
from __future__ import annotations

import os
import platform

import click

from . import output_options


def _version(module: str) -> str:
    try:
        mod = __import__(module)
        return getattr(mod, "__version__", "installed")
    except Exception as exc:  # noqa: BLE001 - report, don't fail
        return f"not available ({type(exc).__name__})"


def _rdkit_corpus_size() -> str:
    try:
        from ..data.rdkit_corpus import corpus_summary
        from ..data.registry import default_root

        return corpus_summary(default_root())
    except Exception as exc:  # noqa: BLE001 - report, don't fail
        return f"not available ({type(exc).__name__})"


def _echo_dgl_libraries() -> None:
    """One line per DGL library (libdgl, tensoradapter, graphbolt): loaded, missing or stubbed, and why."""
    from .._private import dgl_libraries  # loads torch and DGL: only when the verb runs

    click.echo("dgl libraries:")
    for name, state in dgl_libraries().items():
        click.echo(f"  {name:<13} {state}")


@click.command("info")
@output_options
def command():
    """Print versions (python, torch, dgl, rdkit, ogb), devices, and DGL kernel support per device.

    \b
    Example:
      gpse-dgl info
    """
    import torch

    from .. import kernels

    click.echo(f"gpse-dgl  {_version('gpse_dgl')}")
    click.echo(f"python    {platform.python_version()} ({platform.platform()})")
    for name in ("torch", "dgl", "rdkit", "ogb", "numpy", "scipy"):
        click.echo(f"{name:<9} {_version(name)}")
    _echo_dgl_libraries()
    click.echo(f"threads   torch uses {torch.get_num_threads()}")
    click.echo(f"rdkit-molecules  {_rdkit_corpus_size()}")
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        devices.append("mps")
    click.echo("devices:")
    for dev in devices:
        kind = torch.device(dev).type
        name = torch.cuda.get_device_name(torch.device(dev)) if kind == "cuda" else platform.processor() or "cpu"
        ok = kernels.dgl_supports(kind)
        # None: what the ops will pick, GPSE_DGL_BACKEND included
        chosen = kernels.resolve_backend(None, torch.device(dev))
        forced = " (set by GPSE_DGL_BACKEND)" if os.environ.get("GPSE_DGL_BACKEND", "auto") != "auto" else ""
        click.echo(f"  {dev:<8} {name}; DGL kernels: {'yes' if ok else 'no'}; "
                   f"message passing uses the {chosen!r} backend{forced}")
        click.echo(f"           {_precision_line(dev)}")
        # the path of each op (dgl, fused-cpu, triton, torch); on a GPU this imports Triton where it is
        click.echo(f"           paths: {', '.join(f'{op} {path}' for op, path in kernels.paths(dev).items())}")
        click.echo(f"           kernels: {kernels.describe(dev)}")


def _precision_line(device: str) -> str:
    """Which low precisions run natively on ``device`` and the precision suggested there."""
    from ..utils.precision import native_support, suggested_precision

    native = native_support(device)
    state = ", ".join(f"{name} {'native' if ok else 'emulated (slow)' if name == 'bf16' else 'no'}"
                      for name, ok in native.items())
    return f"precision: {state}; suggested --precision {suggested_precision(device)}"
