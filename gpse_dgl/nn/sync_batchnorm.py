"""BatchNorm whose training statistics cover the rows of every process, on any device and backend.

``torch.nn.SyncBatchNorm`` runs on CUDA only; data-parallel training on CPUs (gloo) needs the same on
tensors of any device. In training mode with a joined process group of 2+ ranks,

.. math::

    \\mu = \\frac{\\sum_r \\sum_{i \\in r} x_i}{\\sum_r n_r}, \\qquad
    \\sigma^2 = \\frac{\\sum_r \\sum_{i \\in r} (x_i - \\mu)^2}{\\sum_r n_r}, \\qquad
    y_i = \\gamma \\frac{x_i - \\mu}{\\sqrt{\\sigma^2 + \\epsilon}} + \\beta

(two passes, as ATen's CPU kernel: two all-reduces per call), with gradients through both all-reduces
(``torch.distributed.nn.functional.all_reduce``), so the ranks together compute the BatchNorm of the
global batch. Running statistics are updated as ``nn.BatchNorm1d`` does (unbiased variance). Without a
group, in eval mode, or with one rank it is exactly :class:`gpse_dgl.nn.batch_norm.BatchNorm1d` (which
also takes a training batch of one row).

Example
-------
>>> import torch
>>> norm = SyncBatchNorm1d(4)
>>> x = torch.randn(6, 4)
>>> torch.allclose(norm(x), torch.nn.functional.batch_norm(x, None, None, training=True))
True
"""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
from torch import nn

# torch >= 2.6 marks the autograd-aware collectives deprecated without a drop-in replacement that
# back-propagates; they are what this module needs
warnings.filterwarnings("ignore", message=r"torch\.distributed\.nn\.functional\.all_reduce is deprecated")

from .batch_norm import BatchNorm1d

__all__ = ["SyncBatchNorm1d", "convert_sync_batchnorm"]


def _group_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class SyncBatchNorm1d(BatchNorm1d):
    """``nn.BatchNorm1d`` over ``(N, C)`` rows whose training statistics span all ranks (one row in one
    process: :class:`gpse_dgl.nn.batch_norm.BatchNorm1d`'s rule)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or _group_size() == 1:
            return super().forward(x)
        from torch.distributed.nn.functional import all_reduce  # needs a torch built with distributed support

        total = all_reduce(torch.cat([x.sum(0), x.new_tensor([x.shape[0]])]))
        count = total[-1]
        mean = total[:-1] / count
        centred = x - mean
        var = all_reduce((centred * centred).sum(0)) / count
        if self.track_running_stats and self.running_mean is not None:
            self._update_running_stats(mean.detach(), var.detach(), float(count.detach()))
        y = centred * torch.rsqrt(var + self.eps)
        if self.affine:
            y = y * self.weight + self.bias
        return y

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, var: torch.Tensor, count: float) -> None:
        self.num_batches_tracked.add_(1)
        momentum = (1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum)
        unbiased = var * (count / max(count - 1.0, 1.0))
        self.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        self.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)


def convert_sync_batchnorm(module: nn.Module) -> nn.Module:
    """Replace every ``nn.BatchNorm1d`` of ``module`` (in place) by a :class:`SyncBatchNorm1d` holding
    the same parameters and statistics; return ``module``."""
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm1d) and not isinstance(child, SyncBatchNorm1d):
            synced = SyncBatchNorm1d(child.num_features, child.eps, child.momentum, child.affine,
                                     child.track_running_stats)
            # the same Parameter and buffer objects: an optimiser built before keeps updating them
            for key, value in [*child.named_parameters(recurse=False), *child.named_buffers(recurse=False)]:
                setattr(synced, key, value)
            synced.train(child.training)
            setattr(module, name, synced)
        else:
            convert_sync_batchnorm(child)
    return module
