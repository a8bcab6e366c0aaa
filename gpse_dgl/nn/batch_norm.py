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

__all__ = ["BatchNorm1d", "single_row"]


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
