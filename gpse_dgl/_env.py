"""Process-wide settings that must hold before DGL or OGB are imported.

* DGL picks its tensor backend from ``DGLBACKEND`` at import time; we only support PyTorch.
* ``ogb/__init__.py`` calls ``outdated.warn_if_outdated`` which starts a thread that queries PyPI.
  Offline that thread can hang for a long time; ``OUTDATED_IGNORE=1`` disables the check.
"""
import os

os.environ.setdefault("DGLBACKEND", "pytorch")
os.environ.setdefault("OUTDATED_IGNORE", "1")
