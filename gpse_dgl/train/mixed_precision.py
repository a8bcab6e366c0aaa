"""A training loop's precision: autocast for the forward pass, scaled backward for fp16, fp32 state.

The recipe key ``general_pipeline.precision`` (``fp32`` | ``bf16`` | ``fp16`` | ``auto``) of ``gpse-dgl
pretrain`` and ``gpse-dgl train`` is decided once by the run's entry point
(:func:`~gpse_dgl.utils.precision.decide_precision`) and becomes one :class:`MixedPrecision`. The loop runs
its forward pass and loss in :meth:`MixedPrecision.autocast` and replaces ``loss.backward(); clip; optimizer.step()`` by
:meth:`MixedPrecision.backward_and_step`. Parameters, gradients, optimiser state and checkpoints stay
float32 (autocast casts copies of the weights for each product). fp16 (CUDA only) scales the loss
so that small gradients do not flush to zero (``torch.amp.GradScaler``); bf16 has fp32's exponent range
and needs no scaling. With ``fp32`` every step is exactly the plain loop's.

Example
-------
>>> import torch
>>> from gpse_dgl.train.mixed_precision import MixedPrecision
>>> from gpse_dgl.utils.precision import decide_precision
>>> model = torch.nn.Linear(4, 1)
>>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
>>> mixed = MixedPrecision(decide_precision("fp32", "cpu"))
>>> with mixed.autocast():
...     loss = model(torch.ones(2, 4)).pow(2).mean()
>>> mixed.backward_and_step(loss, optimizer, model.parameters(), clip_grad_norm=1.0)
>>> mixed.state_dict()
{}
"""
from __future__ import annotations

import torch

from ..utils.precision import Precision

__all__ = ["MixedPrecision", "PRECISION_HELP"]

#: What ``general_pipeline.precision`` means: the help text of that key in both training schemas.
PRECISION_HELP = ("fp32, or mixed bf16 (native on CPUs with avx512_bf16/AMX and on recent GPUs) / fp16 "
                  "(CUDA only): dense products in that precision, sums, norms, losses, optimiser state "
                  "and checkpoints in fp32; auto = bf16 where the device runs it natively, else fp32")


class MixedPrecision:
    """Autocast region and optimiser step of one training run in a decided ``precision`` (on its device)."""

    def __init__(self, precision: Precision):
        self.precision = precision
        self.device = precision.device
        self.scaler = precision.grad_scaler()

    def autocast(self):
        """The context to run the forward pass and the loss in (a no-op for fp32)."""
        return self.precision.autocast()

    def backward_and_step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer, parameters,
                          clip_grad_norm: float | None = None, foreach: bool | None = None) -> None:
        """Backward pass, optional gradient-norm clipping (on the unscaled gradients) and optimiser step.

        With fp16 a step whose gradients overflowed is skipped and the scale lowered, as
        ``GradScaler`` does.
        """
        self.scaler.scale(loss).backward()
        if clip_grad_norm is not None:
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, clip_grad_norm, foreach=foreach)
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict:
        """The gradient scaler's state (empty unless fp16), for checkpoints."""
        return self.scaler.state_dict() if self.scaler.is_enabled() else {}

    def load_state_dict(self, state: dict | None) -> None:
        """Restore :meth:`state_dict` output (ignored when empty or when this run does not scale)."""
        if state and self.scaler.is_enabled():
            self.scaler.load_state_dict(state)
