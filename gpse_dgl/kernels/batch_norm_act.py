r"""``fused-cpu`` normalisation step of the downstream layers (``csrc/batch_norm_act.cpp``), forward and backward.

.. math::

    y = \mathrm{act}\big(\mathrm{BN}(x + \mathit{pre})\big) + \mathit{post}, \qquad \mathrm{act} \in \{\mathrm{ReLU}, \mathrm{id}\}

``pre`` and ``post`` are optional. torch runs this as up to four ops (add, ``batch_norm``, ReLU, add), each a pass
over the rows forward and backward with its own autograd node; on a batch of small molecules their fixed costs
exceed their arithmetic. The kernel makes two passes for the statistics and one for the output, two backward, and
its autograd function is C++'s own. Column sums run by fixed blocks of rows, so the result does not depend on the
number of threads. :func:`gpse_dgl.nn.batch_norm.batch_norm_act` (the module's conventions and the torch path) runs it
through :mod:`gpse_dgl.kernels`.

Example
-------
>>> import torch
>>> from gpse_dgl.kernels import batch_norm_act as kernel
>>> x, weight, bias = torch.randn(5, 3), torch.ones(3), torch.zeros(3)
>>> if kernel.supports(x, None, None, weight, bias):
...     y = kernel.batch_norm_act(x, None, None, weight, bias, None, None, batch_stats=True, relu=True,
...                               momentum=0.1, eps=1e-5)
... else:
...     y = torch.relu(torch.nn.functional.batch_norm(x, None, None, weight, bias, training=True))
>>> y.shape, bool((y >= 0).all())
(torch.Size([5, 3]), True)
"""
from __future__ import annotations

import torch

from . import cpu

__all__ = ["batch_norm_act", "supports"]


def supports(x: torch.Tensor, pre: torch.Tensor | None, post: torch.Tensor | None, *columns: torch.Tensor | None
             ) -> bool:
    """Whether the kernel takes these operands: contiguous 2-D float32 rows of one shape on the CPU, float32
    columns of their width (weight, bias, running mean and variance, each optional), and the kernels built."""
    if x.dim() != 2:
        return False
    rows = [t for t in (x, pre, post) if t is not None]
    given = [t for t in columns if t is not None]
    return (all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in rows + given)
            and all(t.shape == x.shape for t in rows) and all(t.shape == x.shape[1:] for t in given)
            and cpu.available())


def batch_norm_act(x: torch.Tensor, pre: torch.Tensor | None, post: torch.Tensor | None, weight: torch.Tensor | None,
                   bias: torch.Tensor | None, running_mean: torch.Tensor | None, running_var: torch.Tensor | None, *,
                   batch_stats: bool, relu: bool, momentum: float, eps: float) -> torch.Tensor:
    """``act(BN(x + pre)) + post`` with autograd (:func:`supports` must hold): with ``batch_stats`` the batch's
    statistics normalise and the running ones given (if any) move by ``momentum``; otherwise the running ones
    normalise and stay."""
    return cpu.kernel().batch_norm_act(x, pre, post, weight, bias, running_mean, running_var, batch_stats, relu,
                                       float(momentum), float(eps))
