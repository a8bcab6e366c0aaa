r"""The GPSE encoder's residual step, fused on the CPU.

.. math::

    h' = h + \frac{y}{\max(\lVert y \rVert_2, \epsilon)}, \qquad y = \mathrm{ReLU}(\mathrm{Dropout}_p(z))

row by row, with :math:`z` a layer's batch-normalised convolution output (``docs/PSE.md``, "Model"); the
input stage is the same step without :math:`h`. With torch ops that is a dropout, a ReLU, a norm, a clamp,
a division and an addition, each a pass over an ``(n, d)`` tensor, and more passes backward: about a fifth
of a paper-size training step on the CPU, in fp32 and bf16 alike (the residual stream is float32 under
autocast). On the ``fused-cpu`` path (:mod:`gpse_dgl.kernels.residual`) the forward reads each row of ``z``
and ``h`` once and writes the result once, the backward reads ``y`` and the result's gradient once and
writes ``z``'s once.

The dropout mask is :mod:`gpse_dgl.nn.dropout`'s for a seed drawn from torch's generator in the same way,
so the fused step drops the same elements as ``dropout`` followed by the torch ops; the results differ
from theirs only by the order in which a row's squares are summed and the rounding of the division, and a
row of ``z`` holding a NaN is NaN in the result, as there. Elsewhere (CUDA, other dtypes, rows that
overlap, no compiler) the torch ops run (the ``torch`` path).

Example
-------
>>> import torch
>>> from gpse_dgl.nn.residual import normalized_residual
>>> h, z = torch.zeros(2, 3), torch.tensor([[3.0, -1.0, 4.0], [0.0, 0.0, -2.0]])
>>> normalized_residual(h, z, p=0.0, training=False)
tensor([[0.6000, 0.0000, 0.8000],
        [0.0000, 0.0000, 0.0000]])
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import kernels
from .dropout import dropout

__all__ = ["EPS", "normalized_residual", "normalized_residual_"]

#: The row norm's floor, ``torch.nn.functional.normalize``'s default (:data:`gpse_dgl.kernels.ROW_NORM_EPS`, the
#: kernels' too).
EPS = kernels.ROW_NORM_EPS


def _drop(p: float, training: bool) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    return p if training else 0.0


def normalized_residual(h: torch.Tensor | None, z: torch.Tensor, p: float = 0.0,
                        training: bool = False) -> torch.Tensor:
    """``h + normalize(relu(dropout(z, p, training)))`` (``h=None``: without the residual), with autograd.

    ``h`` and ``z`` have one shape; the result is a new tensor.
    """
    p = _drop(p, training)
    fused = kernels.run("normalized_residual", h, z, p, autograd=True)
    if fused is not None:
        return fused
    y = F.relu(dropout(z, p, p > 0.0))
    y = F.normalize(y, p=2.0, dim=1, eps=EPS)
    return y if h is None else h + y


def normalized_residual_(h: torch.Tensor, z: torch.Tensor, p: float = 0.0, training: bool = False) -> torch.Tensor:
    """:func:`normalized_residual` in place on ``h`` without autograd; ``z`` may be overwritten. Returns ``h``."""
    p = _drop(p, training)
    if kernels.run("normalized_residual_", h, z, p) is not None:
        return h
    y = dropout(z, p, p > 0.0, inplace=True).relu_()
    return h.addcdiv_(y, torch.linalg.vector_norm(y, dim=1, keepdim=True).clamp_min_(EPS))
