"""The optimiser of every training run: AdamW or Adam, as a recipe's ``general_pipeline.optimizer`` says.

torch's default update on the CPU is a Python loop over the parameter tensors; ``foreach=True`` runs each
operation of the update once over all of them, and ``fused=True`` one kernel per parameter that reads and
writes every element once. On a paper-size GPSE (22 M parameters, 2 threads) one AdamW step took 17 ms
fused against 97 ms with ``foreach`` and 67-126 ms with the loop (``benchmarks/RESULTS.md``, section 4). The
fused kernels exist for CPU and CUDA parameters; on other devices the update runs with ``foreach``.

torch's fused step writes the parameters without counting the write in their version counters (torch
2.13, CPU), which every in-place op does; the models key caches on those counters (the cast weights of
:class:`~gpse_dgl.nn.gated_conv.ResGatedConv`), so after each fused step the counters are advanced here. A
checkpoint's optimiser state written with another update (before the fused one, or on another device) loads
into the update chosen here.

Example
-------
>>> import torch
>>> from gpse_dgl.train.optimizer import build_optimizer
>>> opt = build_optimizer(torch.nn.Linear(4, 2), {"name": "adamw", "lr": 1e-3, "weight_decay": 0.0})
>>> type(opt).__name__, opt.defaults["fused"]
('AdamW', True)
"""
from __future__ import annotations

import functools
from typing import Mapping

import torch
from torch.autograd.graph import increment_version

__all__ = ["FUSED_DEVICES", "OPTIMIZERS", "build_optimizer"]

OPTIMIZERS = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}
#: Device types of torch's fused Adam and AdamW kernels.
FUSED_DEVICES = ("cpu", "cuda")


def build_optimizer(model: torch.nn.Module, recipe: Mapping) -> torch.optim.Optimizer:
    """``recipe["name"]`` (``adamw`` or ``adam``) over ``model``'s parameters with the recipe's ``lr`` and
    ``weight_decay``; fused where every parameter is on a CPU or a CUDA device (call it after ``.to(device)``)."""
    parameters = list(model.parameters())
    fused = bool(parameters) and all(p.device.type in FUSED_DEVICES for p in parameters)
    update = {"fused": True, "foreach": None} if fused else {"fused": None, "foreach": True}
    optimizer = OPTIMIZERS[recipe["name"]](parameters, lr=recipe["lr"], weight_decay=recipe["weight_decay"],
                                           **{key: value for key, value in update.items() if value})
    if fused:
        optimizer.register_step_post_hook(_count_the_writes)
    optimizer.register_load_state_dict_post_hook(functools.partial(_keep_the_update, update=update))
    return optimizer


def _keep_the_update(optimizer: torch.optim.Optimizer, update: dict) -> None:
    """After ``load_state_dict``: the update chosen here, not the one saved. torch restores each parameter group's
    flags as saved, so a checkpoint written before the fused update (or on another device) would otherwise bring
    its own back; the fused update keeps its step counts as float32 tensors on the parameters' device."""
    for group in optimizer.param_groups:
        group.update(update)
    if update["fused"]:
        for parameter, state in optimizer.state.items():
            if "step" in state:
                state["step"] = torch.as_tensor(state["step"], dtype=torch.float32).to(parameter.device)


def _count_the_writes(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    """Advance the version counter of every parameter the fused step updated (see the module docstring)."""
    increment_version([p for group in optimizer.param_groups for p in group["params"] if p.grad is not None])
