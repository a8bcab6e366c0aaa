r"""The learning-rate schedule of a run, built from a recipe's ``general_pipeline.lr_scheduler`` section.

One object for the pretraining and the downstream loops. The loop calls :meth:`LRSchedule.after_step`
after every optimiser step and :meth:`LRSchedule.after_epoch` after every epoch; the schedule decides
which of them moves the rate:

=======================  ===================================================================================
``cosine_with_warmup``   factor :math:`f(t)` of the peak rate at tick :math:`t` (:class:`CosineWithWarmup`):
                         :math:`\max(10^{-6}, t / w)` for :math:`t < w`, then
                         :math:`\tfrac12 (1 + \cos(\pi (t - w) / (T - w)))`, with :math:`w` = warm-up and
                         :math:`T` = whole length in ticks. A tick is an epoch (``interval: epoch``, the
                         paper's and GraphGPS' choice) or an optimiser step (``interval: step``).
``constant`` / ``none``  the peak rate throughout.
``reduce_on_plateau``    torch's ``ReduceLROnPlateau`` on the validation metric passed to ``after_epoch``
                         (``factor``, ``patience``, ``min_lr``); epochs without a finite metric are skipped.
=======================  ===================================================================================

``state_dict()`` is the torch scheduler's, so checkpoints keep their layout and resume as before.

Example
-------
>>> import torch
>>> from gpse_dgl.train.schedule import LRSchedule
>>> optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
>>> schedule = LRSchedule(optimizer, {"name": "cosine_with_warmup", "warmup_epochs": 2}, num_epochs=6)
>>> rates = []
>>> for epoch in range(6):
...     rates.append(round(schedule.lr, 3))
...     optimizer.step()
...     schedule.after_epoch()
>>> rates
[0.0, 0.5, 1.0, 0.854, 0.5, 0.146]
"""
from __future__ import annotations

import math
from typing import Mapping

import torch

__all__ = ["LRSchedule", "CosineWithWarmup"]

CONSTANT_NAMES = ("constant", "none")


class CosineWithWarmup:
    """Learning-rate factor at scheduler tick ``tick``: linear from ~0 to 1 over ``warmup`` ticks, then
    half a cosine down to 0 at ``total`` ticks (the authors' / HuggingFace's schedule).

    A callable object rather than a closure so that ``total`` can be shortened after the warm-up
    (:meth:`LRSchedule.set_length`) and so that ``LambdaLR.state_dict`` saves it.
    """

    def __init__(self, warmup: float, total: float):
        self.warmup, self.total = float(warmup), float(total)

    def __call__(self, tick: int) -> float:
        if tick < self.warmup:
            return max(1e-6, tick / max(1.0, self.warmup))
        progress_ = (tick - self.warmup) / max(1.0, self.total - self.warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress_)))


def _constant(tick: int) -> float:
    return 1.0


class LRSchedule:
    """The rate of ``optimizer`` over a run, as an ``lr_scheduler`` recipe section says.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        Its ``param_groups[i]["lr"]`` is the peak rate (read once, here).
    settings : mapping
        ``name`` (see the module docstring), ``warmup_epochs`` (cosine), ``interval`` (``"epoch"``
        when absent), ``factor`` / ``patience`` / ``min_lr`` (plateau).
    num_epochs : int
        Length of the run; the cosine reaches 0 there (:meth:`set_length` changes it).
    steps_per_epoch : int
        Optimiser steps per epoch (used with ``interval: step``).
    higher_is_better : bool
        Direction of the metric that ``reduce_on_plateau`` watches.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, settings: Mapping, num_epochs: int,
                 steps_per_epoch: int = 1, higher_is_better: bool = True):
        self.optimizer = optimizer
        self.name = settings["name"]
        self.settings = dict(settings)
        self.per_step = settings.get("interval", "epoch") == "step"
        self.ticks_per_epoch = steps_per_epoch if self.per_step else 1
        if self.name == "reduce_on_plateau":
            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode="max" if higher_is_better else "min", factor=settings["factor"],
                patience=settings["patience"], min_lr=settings["min_lr"])
        elif self.name == "cosine_with_warmup":
            factor = CosineWithWarmup(settings["warmup_epochs"] * self.ticks_per_epoch,
                                      num_epochs * self.ticks_per_epoch)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        elif self.name in CONSTANT_NAMES:
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _constant)
        else:
            raise ValueError(f"unknown learning-rate schedule {self.name!r}")

    @classmethod
    def from_recipe(cls, optimizer: torch.optim.Optimizer, general: Mapping, steps_per_epoch: int = 1,
                    higher_is_better: bool = True) -> "LRSchedule":
        """The schedule a recipe's ``general_pipeline`` section describes (``lr_scheduler`` over
        ``num_epochs``); both training loops build theirs here."""
        return cls(optimizer, general["lr_scheduler"], general["num_epochs"], steps_per_epoch, higher_is_better)

    @property
    def lr(self) -> float:
        """The rate the next optimiser step uses (first parameter group)."""
        return self.optimizer.param_groups[0]["lr"]

    def after_step(self) -> None:
        """Call after every optimiser step (moves per-step schedules)."""
        if self.per_step and self.name != "reduce_on_plateau":
            self.scheduler.step()

    def after_epoch(self, metric: float | None = None) -> None:
        """Call after every epoch with the validation metric when there was an evaluation."""
        if self.name == "reduce_on_plateau":
            if metric is not None and math.isfinite(metric):
                self.scheduler.step(metric)
        elif not self.per_step:
            self.scheduler.step()

    def set_length(self, num_epochs: int) -> None:
        """Make the cosine end at ``num_epochs`` (the warm-up stays); the current rate follows at once.

        Used when a run is fitted to a time limit and when a resumed run has another length than the
        checkpoint it continues (whose schedule object carries the old one).
        """
        if self.name != "cosine_with_warmup":
            return
        factor = self.scheduler.lr_lambdas[0]
        factor.warmup = float(self.settings["warmup_epochs"] * self.ticks_per_epoch)
        factor.total = float(num_epochs * self.ticks_per_epoch)
        # a scheduler rebuilt at the current tick sets the rate of that tick under the new lengths
        # (from the peak rates stored in the optimiser as "initial_lr")
        tick = self.scheduler.last_epoch
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor, last_epoch=tick - 1)

    def state_dict(self) -> dict:
        """The torch scheduler's state (what checkpoints store)."""
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(state)
