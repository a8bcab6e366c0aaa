"""The frame both training pipelines run in: the process group, the threads and the run directory.

``gpse-dgl pretrain`` and ``gpse-dgl train`` each open one :func:`open_run` around their work. Under
``torchrun`` it joins the processes (:func:`gpse_dgl.utils.distributed.process_group`) and quiets every rank but
0; it sets the torch threads inside the group, so that each process takes its share of the cores; and rank 0
alone opens the run directory (:class:`~gpse_dgl.train.rundir.RunDirectory`: its checks, lock and safe
``--overwrite``) and checks it holds what ``--resume`` / a fresh run expects, while the other ranks wait at a
barrier until it has. Every rank gets the :class:`~gpse_dgl.train.rundir.RunDirectory` object (its
``allow_recipe_change`` is read on every rank); only rank 0 writes through it.

Example
-------
>>> import tempfile
>>> from gpse_dgl.train.run_frame import open_run
>>> general = {"distributed": "auto", "num_threads": None}
>>> with open_run(general, "cpu", tempfile.mkdtemp(), ["out.txt"], resume=False, overwrite=False,
...               check_directory=lambda root, resume, overwrite: None) as frame:
...     (frame.ctx.world_size, frame.device.type, frame.ctx.is_main)
(1, 'cpu', True)
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from ..utils import distributed as dist_utils
from .rundir import RunDirectory
from .runtime import resolve_device, torch_threads

__all__ = ["RunFrame", "open_run"]


@dataclass
class RunFrame:
    """Where a run stands once its frame is open."""

    ctx: dist_utils.Context    # this process's place in the group (world size 1 without torchrun)
    device: torch.device       # this rank's device
    rundir: RunDirectory       # opened on rank 0 only
    progress: bool             # bars: off on ranks other than 0
    log: Callable[[str], None]  # one line of output: silent on ranks other than 0


@contextlib.contextmanager
def open_run(general: dict, device: str, root: str | os.PathLike, outputs: Iterable[str], *, resume: bool,
             overwrite: bool, check_directory: Callable, allow_recipe_change: bool = False, cache_dir=None,
             progress: bool = False, log: Callable[[str], None] = lambda message: None):
    """Open the frame of one run (see the module doc) for a recipe's ``general_pipeline`` section and device
    name; ``outputs`` are what the run writes into ``root`` (what ``--overwrite`` replaces), and
    ``check_directory(root, resume, overwrite)`` raises where ``root`` does not hold what the flags expect."""
    with dist_utils.process_group(general["distributed"], resolve_device(device)) as ctx:
        if not ctx.is_main:
            progress, log = False, (lambda message: None)
        rundir = RunDirectory(root, outputs, overwrite and not resume, cache_dir, allow_recipe_change)
        with torch_threads(general["num_threads"], log), rundir if ctx.is_main else contextlib.nullcontext():
            if ctx.is_main:
                check_directory(rundir.root, resume, overwrite)
            dist_utils.barrier()
            yield RunFrame(ctx, dist_utils.local_device(resolve_device(device), ctx), rundir, progress, log)
