"""BatchNorm that also trains on a batch of one row.

``torch.nn.BatchNorm1d`` refuses a training batch of a single row (``Expected more than 1 value per
channel when training``): the batch variance of one row is undefined. Such batches are ordinary in
practice: a table of small molecules has single-atom ones (a batch of one graph with one node), the last
batch of an epoch may hold one graph (graph-level rows), and a neighbour-sampled batch may hold one seed.

:class:`BatchNorm1d` is ``nn.BatchNorm1d`` on every other input. On one row in training mode it
normalises with the running statistics, as in evaluation, and leaves them unchanged (one row says nothing
about the spread), as PyG's ``BatchNorm(allow_single_element=True)`` does; the affine weight and bias still
receive gradients. Without running statistics it returns what batch statistics of one row give, the bias
(the row minus its own mean is zero). State-dict keys are ``nn.BatchNorm1d``'s, so checkpoints are
unchanged.

Example
-------
>>> import torch
>>> norm = BatchNorm1d(4).train()
>>> norm(torch.randn(1, 4)).shape
torch.Size([1, 4])
>>> x = torch.randn(6, 4)
>>> torch.equal(norm(x), torch.nn.functional.batch_norm(x, None, None, norm.weight, norm.bias, training=True))
True
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import kernels
from .dropout import dropout as dropout_fn

__all__ = ["BatchNorm1d", "batch_norm_act", "single_row"]


def single_row(x: torch.Tensor) -> bool:
    """Whether ``x`` is a batch that ``nn.BatchNorm1d`` cannot normalise in training mode (one value per
    channel)."""
    return x.numel() == x.shape[1] if x.dim() >= 2 else x.numel() == 1


class BatchNorm1d(nn.BatchNorm1d):
    """``nn.BatchNorm1d`` that accepts a training batch of one row (see the module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and single_row(x)):
            return super().forward(x)
        if self.running_mean is not None and self.running_var is not None:
            # evaluation arithmetic; training=False leaves the running statistics and the counter alone
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps)
        y = torch.zeros_like(x)
        if self.affine:
            y = y * self.weight + self.bias  # through the parameters, so they keep their gradients
        return y


#: The modules whose arithmetic the kernel reproduces; anything else (a subclass included) runs its own forward.
_PLAIN_BATCH_NORMS = (nn.BatchNorm1d, BatchNorm1d)


def batch_norm_act(norm: nn.Module, x: torch.Tensor, pre: torch.Tensor | None = None, relu: bool = False,
                   post: torch.Tensor | None = None, dropout: float = 0.0) -> torch.Tensor:
    r"""``Dropout(act(norm(x + pre))) + post``: the normalisation step of the downstream layers in one op where it can.

    .. math:: y = \mathrm{Dropout}_p\big(\mathrm{act}(\mathrm{norm}(x + \mathit{pre}))\big) + \mathit{post}

    ``act`` is ReLU with ``relu=True``, the identity otherwise; ``pre`` and ``post`` are optional. With a
    ``BatchNorm1d`` (``nn.BatchNorm1d`` or this module's, not a subclass) on float32 CPU rows this is the
    ``fused-cpu`` kernel of :mod:`gpse_dgl.kernels.batch_norm_act` (one autograd node instead of up to four), with
    the module's own conventions: batch statistics in training, moving the running ones and counting
    ``num_batches_tracked``; the running ones in evaluation; and :class:`BatchNorm1d`'s rule for a training batch
    of one row. Anything else (another norm or a subclass such as ``SyncBatchNorm1d``, whose statistics span the
    ranks; ``nn.Identity``; CUDA; dropout ``p > 0`` in training) runs the same steps as torch ops. bf16 CPU rows
    (a Linear's output under autocast) are normalised as their float32 copy, so the result is float32.
    Dropout after the ReLU drops what dropout before it would (the mask scales by a positive factor).

    Example
    -------
    >>> import torch
    >>> norm = BatchNorm1d(4).train()
    >>> x, res = torch.randn(6, 4), torch.randn(6, 4)
    >>> y = batch_norm_act(norm, x, relu=True, post=res)
    >>> torch.allclose(y, torch.relu(BatchNorm1d(4).train()(x)) + res, atol=1e-6)
    True
    """
    # Only the plain classes: a subclass may compute its statistics otherwise (SyncBatchNorm1d spans the ranks).
    drops = dropout > 0.0 and norm.training
    plain = type(norm) in _PLAIN_BATCH_NORMS
    if plain:
        # bf16 rows (a Linear's output under autocast) are normalised in float32, as the precision contract has
        # norms; the kernel then runs, and one cast costs less than the four unfused bf16 ops
        x, pre = _float_rows(x), _float_rows(pre)
    if plain and not drops and x.dim() == 2 and x.shape[0] > 0:
        track = norm.running_mean is not None and norm.running_var is not None
        batch_stats = norm.training or not track
        if batch_stats and track and single_row(x):
            batch_stats = False  # BatchNorm1d's rule: one row normalises with the running statistics, unchanged
        fused = not (batch_stats and x.shape[0] < 2)  # one row without running statistics: BatchNorm1d's own rule
        update = batch_stats and norm.training and track
        momentum = 0.0
        if update:
            momentum = norm.momentum if norm.momentum is not None else 1.0 / (float(norm.num_batches_tracked) + 1)
        running = (norm.running_mean, norm.running_var) if (update or not batch_stats) else (None, None)
        out = kernels.run("batch_norm_act", x, pre, post, norm.weight, norm.bias, *running, autograd=True,
                          batch_stats=batch_stats, relu=relu, momentum=momentum, eps=norm.eps) if fused else None
        if out is not None:
            if update:
                norm.num_batches_tracked.add_(1)
            return out
    out = norm(x if pre is None else x + pre)
    if relu:
        out = F.relu(out)
    out = dropout_fn(out, dropout, norm.training)
    return out if post is None else post + out


def _float_rows(t: torch.Tensor | None) -> torch.Tensor | None:
    """bfloat16 CPU rows as contiguous float32; anything else unchanged."""
    return t.float().contiguous() if t is not None and t.dtype == torch.bfloat16 and t.device.type == "cpu" else t
