"""Process-wide settings that must hold before DGL or OGB are imported.

* DGL picks its tensor backend from ``DGLBACKEND`` at import time; we only support PyTorch.
* ``ogb/__init__.py`` calls ``outdated.warn_if_outdated`` which starts a thread that queries PyPI.
  Offline that thread can hang for a long time; ``OUTDATED_IGNORE=1`` disables the check.
* DGL 2.x's graphbolt (unused here) breaks ``import dgl`` with a torch it has no library for;
  :mod:`gpse_dgl._dgl_compat` stands in for it in that case only.
"""
import os

from . import _dgl_compat

os.environ.setdefault("DGLBACKEND", "pytorch")
os.environ.setdefault("OUTDATED_IGNORE", "1")
_dgl_compat.guard_graphbolt()
