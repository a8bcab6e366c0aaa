r"""``fused-cpu`` residual step of the GPSE encoder (``csrc/residual.cpp``), forward and backward.

.. math::

    h' = h + \frac{y}{\max(\lVert y \rVert_2, \epsilon)}, \qquad y = \mathrm{ReLU}(\mathrm{Dropout}_p(z))

row by row: the forward reads each row of ``z`` and ``h`` once and writes the result once, the backward reads
``y`` and the result's gradient once and writes ``z``'s once, where torch ops make a pass over an ``(n, d)``
tensor per op (about a fifth of a paper-size training step on the CPU). The dropout mask is
:mod:`gpse_dgl.kernels.dropout`'s for the seed given, so the step drops the same elements as that dropout
followed by torch ops. :func:`gpse_dgl.nn.residual.normalized_residual` (the math, the checks and the torch
path) runs it through :mod:`gpse_dgl.kernels`.

Example
-------
>>> import torch
>>> from gpse_dgl.kernels import residual
>>> h, z = torch.zeros(2, 3), torch.tensor([[3.0, -1.0, 4.0], [0.0, 0.0, -2.0]])
>>> if residual.supports(h, z):
...     _ = residual.normalized_residual_(h, z, 0.0)
... else:
...     h = torch.tensor([[0.6, 0.0, 0.8], [0.0, 0.0, 0.0]])
>>> h
tensor([[0.6000, 0.0000, 0.8000],
        [0.0000, 0.0000, 0.0000]])
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable
from torch.autograd.graph import increment_version

from . import cpu
from .dropout import draw_seed

__all__ = ["EPS", "normalized_residual", "normalized_residual_", "supports"]

#: The row norm's floor, ``torch.nn.functional.normalize``'s default: the one value of every path (the torch ops of
#: :mod:`gpse_dgl.nn.residual` and :class:`gpse_dgl.nn.gpse.GPSE`, this kernel, the Triton residual update).
EPS = 1e-12


def supports(h: torch.Tensor | None, z: torch.Tensor, p: float = 0.0) -> bool:
    """Whether the kernel takes these rows: float32 on the CPU, one shape, rows it can write in place
    (:func:`gpse_dgl.kernels.cpu.distinct_rows`: the step may write ``h`` or ``z`` itself), ``p < 1``, and the
    kernels built."""
    operands = (z,) if h is None else (h, z)
    return (p < 1.0 and (h is None or h.shape == z.shape)
            and all(t.device.type == "cpu" and t.dtype == torch.float32 and cpu.distinct_rows(t) for t in operands)
            and cpu.available())


def normalized_residual(h: torch.Tensor | None, z: torch.Tensor, p: float) -> torch.Tensor:
    """``h + normalize(relu(dropout(z, p)))`` (``h=None``: without the residual) with autograd, as a new tensor;
    ``p`` is the dropout probability in force (0 in eval mode)."""
    seed = _seed(p)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (h, z)):
        return _NormalizedResidual.apply(h, z, seed, p)
    out = torch.empty(z.shape, dtype=torch.float32)
    cpu.kernel().residual_forward(z, h, seed, p, EPS, None, None, out)
    return out


def normalized_residual_(h: torch.Tensor, z: torch.Tensor, p: float) -> torch.Tensor:
    """:func:`normalized_residual` in place on ``h`` without autograd. Returns ``h``."""
    cpu.kernel().residual_forward(z, h, _seed(p), p, EPS, None, None, h)
    increment_version(h)  # written through its pointer: counted as an in-place op counts it
    return h


def _seed(p: float) -> int:
    """The seed of one dropout draw (:func:`gpse_dgl.kernels.dropout.draw_seed`), drawn only where something is
    dropped, so that eval mode leaves torch's generator where it was."""
    return draw_seed() if p > 0.0 else 0


class _NormalizedResidual(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, z, seed, p):
        n, d = z.shape
        keep = ctx.needs_input_grad[1]  # y and the row norms only where z's gradient is wanted
        y = torch.empty((n, d), dtype=torch.float32) if keep else None
        norm = torch.empty(n, dtype=torch.float32) if keep else None
        out = torch.empty((n, d), dtype=torch.float32)
        cpu.kernel().residual_forward(z, h, seed, p, EPS, y, norm, out)
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
            cpu.kernel().residual_backward(y, norm, grad_out, ctx.p, EPS, grad_z)
        grad_h = grad_out if ctx.needs_input_grad[0] else None
        return grad_h, grad_z, None, None
