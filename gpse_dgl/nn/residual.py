r"""The GPSE encoder's residual step, fused on the CPU.

.. math::

    h' = h + \frac{y}{\max(\lVert y \rVert_2, \epsilon)}, \qquad y = \mathrm{ReLU}(\mathrm{Dropout}_p(z))

row by row, with :math:`z` a layer's batch-normalised convolution output (``docs/PSE.md``, "Model"); the
input stage is the same step without :math:`h`. With torch ops that is a dropout, a ReLU, a norm, a clamp,
a division and an addition, each a pass over an ``(n, d)`` tensor, and more passes backward: about a fifth
of a paper-size training step on the CPU, in fp32 and bf16 alike (the residual stream is float32 under
autocast). With the compiled kernels of :mod:`gpse_dgl.nn.native` (``nn/csrc/residual.cpp``) the forward
reads each row of ``z`` and ``h`` once and writes the result once, the backward reads ``y`` and the
result's gradient once and writes ``z``'s once.

The dropout mask is :mod:`gpse_dgl.nn.dropout`'s for a seed drawn from torch's generator in the same way,
so the fused step drops the same elements as ``dropout`` followed by the torch ops; the results differ
from theirs only by the order in which a row's squares are summed and the rounding of the division, and a
row of ``z`` holding a NaN is NaN in the result, as there. Elsewhere (CUDA, other dtypes, rows that
overlap, no compiler) the torch ops run.

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
from torch.autograd.function import once_differentiable
from torch.autograd.graph import increment_version

from . import native
from .dropout import draw_seed, dropout

__all__ = ["EPS", "normalized_residual", "normalized_residual_"]

#: The row norm's floor, ``torch.nn.functional.normalize``'s default.
EPS = 1e-12


def _fused(*tensors: torch.Tensor) -> bool:
    """Whether the kernel takes these rows: float32 on the CPU, 2-D, unit column stride, rows that do not overlap
    (an expanded tensor's do), and the kernels built."""
    return (all(t.device.type == "cpu" and t.dtype == torch.float32 and t.dim() == 2 and t.stride(-1) == 1
                and (t.shape[0] <= 1 or t.stride(0) >= t.shape[1]) for t in tensors)
            and native.kernel() is not None)


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
    operands = (z,) if h is None else (h, z)
    if p >= 1.0 or not _fused(*operands) or (h is not None and h.shape != z.shape):
        y = F.relu(dropout(z, p, p > 0.0))
        y = F.normalize(y, p=2.0, dim=1, eps=EPS)
        return y if h is None else h + y
    seed = draw_seed() if p > 0.0 else 0
    if torch.is_grad_enabled() and any(t.requires_grad for t in operands):
        return _NormalizedResidual.apply(h, z, seed, p)
    out = torch.empty(z.shape, dtype=torch.float32)
    native.kernel().residual_forward(z, _or_empty(h), seed, p, EPS, _EMPTY, _EMPTY, out)
    return out


def normalized_residual_(h: torch.Tensor, z: torch.Tensor, p: float = 0.0, training: bool = False) -> torch.Tensor:
    """:func:`normalized_residual` in place on ``h`` without autograd; ``z`` may be overwritten. Returns ``h``."""
    p = _drop(p, training)
    if p < 1.0 and _fused(h, z) and h.shape == z.shape:
        native.kernel().residual_forward(z, h, draw_seed() if p > 0.0 else 0, p, EPS, _EMPTY, _EMPTY, h)
        increment_version(h)  # written through its pointer: counted as an in-place op counts it
        return h
    y = dropout(z, p, p > 0.0, inplace=True).relu_()
    return h.addcdiv_(y, torch.linalg.vector_norm(y, dim=1, keepdim=True).clamp_min_(EPS))


_EMPTY = torch.empty(0)


def _or_empty(t: torch.Tensor | None) -> torch.Tensor:
    return _EMPTY if t is None else t


class _NormalizedResidual(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, z, seed, p):
        n, d = z.shape
        keep = ctx.needs_input_grad[1]  # y and the row norms only where z's gradient is wanted
        y = torch.empty((n, d), dtype=torch.float32) if keep else _EMPTY
        norm = torch.empty(n, dtype=torch.float32) if keep else _EMPTY
        out = torch.empty((n, d), dtype=torch.float32)
        native.kernel().residual_forward(z, _or_empty(h), seed, p, EPS, y, norm, out)
        ctx.p = p
        ctx.save_for_backward(y, norm)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        y, norm = ctx.saved_tensors
        grad_out = grad_out.to(torch.float32).contiguous()
        grad_z = None
        if ctx.needs_input_grad[1]:
            grad_z = torch.empty_like(y)
            native.kernel().residual_backward(y, norm, grad_out, ctx.p, EPS, grad_z)
        grad_h = grad_out if ctx.needs_input_grad[0] else None
        return grad_h, grad_z, None, None
