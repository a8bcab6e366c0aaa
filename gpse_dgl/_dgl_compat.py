"""The one import guard gpse-dgl applies to DGL: keep ``dgl.graphbolt`` from breaking ``import dgl``.

DGL 2.x imports its ``graphbolt`` sub-package while ``import dgl`` runs (through ``dgl.distributed``).
That package loads a C++ library built for one exact torch release
(``dgl/graphbolt/libgraphbolt_pytorch_<torch version>.so`` on Linux; DGL 2.1.0 ships them for torch 2.0.0-2.2.1)
and imports ``torchdata.datapipes`` (removed in torchdata 0.10). With any other torch, or without that
torchdata, ``import dgl`` fails although gpse-dgl never uses graphbolt: DGL 2.1.0 is the only DGL wheel
for Python 3.12.

:func:`guard_graphbolt` runs before DGL is imported. When the real graphbolt would fail to import, it puts
a stub module under the name ``dgl.graphbolt`` into ``sys.modules``: ``dgl.distributed`` only binds the
name at import time, and every attribute access on the stub raises :class:`GraphboltUnavailable`, naming
the reason. When graphbolt would import (DGL 1.x has none; DGL 2.x with a matching torch and torchdata),
nothing is touched. Nothing is written to disk. The decision is taken from files on disk, without importing
DGL or torch, and recorded in :data:`GRAPHBOLT_STATUS` for ``gpse-dgl info``
(:func:`gpse_dgl._private.dgl_libraries`). The private DGL and torch attributes gpse-dgl reads once they are
imported are all in :mod:`gpse_dgl._private`.

Example
-------
>>> from gpse_dgl import _dgl_compat
>>> _dgl_compat.GRAPHBOLT_STATUS.startswith(("absent", "real", "stubbed", "not checked"))
True
"""
from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import types

GRAPHBOLT_MODULE = "dgl.graphbolt"

#: One line for ``gpse-dgl info``: ``absent`` (DGL 1.x), ``real`` (DGL's own graphbolt is importable),
#: ``stubbed: <reason>``, or ``not checked`` (DGL was imported before gpse-dgl, or is not installed).
GRAPHBOLT_STATUS = "not checked"


class GraphboltUnavailable(ImportError):
    """Raised by any use of the stubbed ``dgl.graphbolt`` (gpse-dgl itself never uses it)."""


def graphbolt_library_name(torch_version: str, platform: str = sys.platform) -> str:
    """The file name DGL 2.x looks for under ``dgl/graphbolt/`` for ``torch_version`` (its own naming rule)."""
    version = torch_version.split("+", maxsplit=1)[0]
    if platform.startswith("win"):
        return f"graphbolt_pytorch_{version}.dll"
    return f"libgraphbolt_pytorch_{version}.{'dylib' if platform.startswith('darwin') else 'so'}"


def graphbolt_problem(dgl_dir: str, torch_version: str, has_torchdata_datapipes: bool) -> str | None:
    """Why DGL's graphbolt in ``dgl_dir`` would fail to import, or ``None`` if it would import.

    ``None`` too when the installed DGL has no graphbolt package at all (DGL 1.x).
    """
    graphbolt_dir = os.path.join(dgl_dir, "graphbolt")
    if not os.path.isdir(graphbolt_dir):
        return None
    library = graphbolt_library_name(torch_version)
    if not os.path.exists(os.path.join(graphbolt_dir, library)):
        return f"DGL ships no {library} (no graphbolt library for torch {torch_version})"
    if not has_torchdata_datapipes:
        return "torchdata.datapipes is not installed (graphbolt imports it; torchdata >= 0.10 removed it)"
    return None


#: graphbolt classes that DGL's own non-graphbolt code tests with ``isinstance`` (DGL 2.1's graph server
#: asks whether its partition is a ``FusedCSCSamplingGraph``): the stub has a class of that name that
#: nothing is an instance of and that cannot be created.
ISINSTANCE_NAMES = ("FusedCSCSamplingGraph",)


def _placeholder_class(name: str, reason: str) -> type:
    def __init__(self, *args, **kwargs):
        raise GraphboltUnavailable(f"dgl.graphbolt.{name} is unavailable: {reason}. gpse-dgl does not use "
                                   f"graphbolt; see docs/INSTALL.md")

    return type(name, (), {"__init__": __init__, "__module__": GRAPHBOLT_MODULE,
                           "__doc__": f"Placeholder for graphbolt's {name}: no object is one ({reason})."})


def make_stub(reason: str) -> types.ModuleType:
    """A module object standing in for ``dgl.graphbolt``; every attribute access raises, except the
    placeholder classes of :data:`ISINSTANCE_NAMES` (for ``isinstance`` checks; creating one raises)."""
    stub = types.ModuleType(GRAPHBOLT_MODULE, f"Stand-in for DGL's graphbolt, installed by gpse-dgl: {reason}")

    def __getattr__(name: str):
        if name.startswith("__"):  # keep introspection (copy, pickle, doctest) working
            raise AttributeError(name)
        raise GraphboltUnavailable(f"dgl.graphbolt.{name} is unavailable: {reason}. gpse-dgl does not use "
                                   f"graphbolt; see docs/INSTALL.md")

    stub.__getattr__ = __getattr__
    for name in ISINSTANCE_NAMES:
        setattr(stub, name, _placeholder_class(name, reason))
    # the stub is not a package: a `dgl.graphbolt.<sub>` import fails with the reason above, too
    stub.__spec__ = importlib.machinery.ModuleSpec(GRAPHBOLT_MODULE, None)
    stub.__gpse_dgl_stub__ = True
    return stub


def _has_torchdata_datapipes() -> bool:
    spec = importlib.util.find_spec("torchdata")
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    return any(os.path.isdir(os.path.join(loc, "datapipes")) for loc in locations)


def guard_graphbolt() -> str:
    """Install the ``dgl.graphbolt`` stub if DGL's own would break ``import dgl``; return the status line."""
    global GRAPHBOLT_STATUS
    if "dgl" in sys.modules:  # too late to decide; whatever loaded stays
        stub = sys.modules.get(GRAPHBOLT_MODULE)
        if getattr(stub, "__gpse_dgl_stub__", False):
            GRAPHBOLT_STATUS = f"stubbed: {stub.__doc__.split(': ', 1)[1]}"
        return GRAPHBOLT_STATUS
    spec = importlib.util.find_spec("dgl")
    if spec is None or not spec.submodule_search_locations:
        return GRAPHBOLT_STATUS
    dgl_dir = list(spec.submodule_search_locations)[0]
    if not os.path.isdir(os.path.join(dgl_dir, "graphbolt")):
        GRAPHBOLT_STATUS = "absent (this DGL has none)"
        return GRAPHBOLT_STATUS
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return GRAPHBOLT_STATUS
    reason = graphbolt_problem(dgl_dir, torch_version, _has_torchdata_datapipes())
    if reason is None:
        GRAPHBOLT_STATUS = "real (DGL's own; it imports with this torch)"
    else:
        sys.modules[GRAPHBOLT_MODULE] = make_stub(reason)
        GRAPHBOLT_STATUS = f"stubbed: {reason}"
    return GRAPHBOLT_STATUS

