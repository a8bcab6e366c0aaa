"""What ``torchrun``'s environment says about this process, read without importing torch.

The CLI asks it for every verb it lists or runs (a verb that does not share its work among processes refuses to
run under torchrun), and ``gpse-dgl --help`` must not load torch to list the verbs
(``gpse_dgl/commands/__init__.py``). Joining the processes is :mod:`gpse_dgl.utils.distributed`'s.

Example
-------
>>> import os
>>> os.environ.get("WORLD_SIZE") is not None or launched_world_size() == 1
True
"""
from __future__ import annotations

import os

from .errors import GPSEError

__all__ = ["DistributedError", "launched_world_size", "refuse_under_torchrun"]


class DistributedError(GPSEError, RuntimeError):
    """A multi-process run cannot start or lost one of its processes (one-line message)."""


def launched_world_size() -> int:
    """``WORLD_SIZE`` set by ``torchrun`` (1 when not launched by it)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        raise DistributedError(f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not a number") from None


def refuse_under_torchrun(verb: str, sharded: tuple) -> None:
    """A one-line error for a verb that cannot share its work among torchrun's processes."""
    if launched_world_size() > 1:
        raise DistributedError(f"'{verb}' does not run under torchrun ({launched_world_size()} processes); "
                               f"run it as one process (verbs sharded by torchrun: {', '.join(sharded)})")
