r"""Triton kernels of the CUDA inference path (imported only where Triton is; :mod:`gpse_dgl.kernels.gpu`
decides when they run).

``gated_sum``, per destination row :math:`v` and block of channels:

.. math::
    out_v \mathrel{+}= \sum_{e = (u, v)} \sigma(g^{dst}_v + g^{src}_u) \odot x_u

over the in-edges of :math:`v` in edge-id order (a destination-sorted CSR), ``BLOCK_E`` edges at a time:
no ``(E, d)`` tensor, no atomics, so the sum of a row does not depend on the launch. Rows are read in
their dtype (float32, bfloat16 or float16) at any row stride (the column blocks of one projection);
gates and sums are float32.

``residual_update``, per row of an eval-mode GPSE layer (BatchNorm with running statistics, no dropout):

.. math::
    y = \max(0, \alpha \odot c + \beta), \quad \alpha = w / \sqrt{\sigma^2 + \epsilon}, \quad
    \beta = b - \mu \alpha, \qquad h \mathrel{+}= y / \max(\lVert y \rVert_2, \varepsilon)

in one pass, where torch needs about ten launches per layer (on molecule batches the GPU waits on them);
:math:`\epsilon` is the BatchNorm's, :math:`\varepsilon` the row norm's floor of every path
(:data:`gpse_dgl.kernels.residual.EPS`).

On CUDA tensors they are compiled. With ``TRITON_INTERPRET=1`` set before Triton is imported, Triton runs
them in its interpreter on CPU tensors instead: that is how the tests check their logic on machines
without a GPU (``tests/conftest.py`` sets it there).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .residual import EPS as ROW_NORM_EPS

__all__ = ["BLOCK_E", "gated_sum_", "residual_update_"]

#: Edges one program reads at a time: a tile of ``BLOCK_E`` source rows in flight per destination.
#: Fixed, so that a row's summation order depends on its in-edges only, not on the batch it is in.
BLOCK_E = 8
#: Channels per program of ``gated_sum`` (a destination row is split over ``ceil(d / BLOCK_D)`` programs).
GATED_BLOCK_D = 128


def _gated_sum_kernel(start_ptr, stop_ptr, index_ptr, dst_gate_ptr, src_gate_ptr, src_feat_ptr, out_ptr,
                      dst_gate_stride, src_gate_stride, src_feat_stride, out_stride, dim,
                      BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    start = tl.load(start_ptr + row)
    stop = tl.load(stop_ptr + row)
    dst_gate = tl.load(dst_gate_ptr + row * dst_gate_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    first = start
    while first < stop:  # a while loop: Triton's interpreter cannot take loaded bounds in range()
        edges = first + tl.arange(0, BLOCK_E)
        edge_mask = edges < stop
        src = tl.load(index_ptr + edges, mask=edge_mask, other=0)
        mask = edge_mask[:, None] & col_mask[None, :]
        src_gate = tl.load(src_gate_ptr + src[:, None] * src_gate_stride + cols[None, :], mask=mask, other=0.0)
        src_feat = tl.load(src_feat_ptr + src[:, None] * src_feat_stride + cols[None, :], mask=mask, other=0.0)
        gate = tl.sigmoid(dst_gate[None, :] + src_gate.to(tl.float32))
        acc += tl.sum(gate * src_feat.to(tl.float32), axis=0)  # masked edges read feature 0
        first += BLOCK_E
    out = out_ptr + row * out_stride + cols
    tl.store(out, tl.load(out, mask=col_mask, other=0.0) + acc, mask=col_mask)


def _residual_update_kernel(h_ptr, conv_ptr, mean_ptr, var_ptr, weight_ptr, bias_ptr,
                            h_stride, conv_stride, dim, eps, floor,
                            HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < dim
    conv = tl.load(conv_ptr + row * conv_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    var = tl.load(var_ptr + cols, mask=mask, other=1.0).to(tl.float32)
    alpha = tl.div_rn(1.0, tl.sqrt_rn(var + eps))
    if HAS_WEIGHT:
        alpha = alpha * tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    beta = -mean * alpha
    if HAS_BIAS:
        beta = beta + tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.maximum(conv * alpha + beta, 0.0)
    y = tl.where(mask, y, 0.0)
    norm = tl.sqrt_rn(tl.sum(y * y, axis=0))  # correctly rounded, as torch's (the default is approximate)
    h = h_ptr + row * h_stride + cols
    tl.store(h, tl.load(h, mask=mask, other=0.0) + tl.div_rn(y, tl.maximum(norm, floor)), mask=mask)


@functools.lru_cache(maxsize=None)
def _kernel(name: str):
    return triton.jit(globals()[name])  # Triton's interpreter instead where TRITON_INTERPRET=1


def _launch(name: str, device: torch.device, grid: tuple, *args, **options) -> None:
    """Run the kernel ``name`` on ``device``: a GPU (Triton launches on the current device, so that device
    is made current for the launch), or the CPU under Triton's interpreter."""
    if device.type != "cuda":
        if not triton.knobs.runtime.interpret:
            raise ValueError(f"the Triton kernels take CUDA tensors, got {device} (CPU tensors run in Triton's "
                             "interpreter when TRITON_INTERPRET=1 is set before Triton is imported)")
        _kernel(name)[grid](*args, **options)
        return
    with torch.cuda.device(device):
        _kernel(name)[grid](*args, **options)


def gated_sum_(starts: torch.Tensor, stops: torch.Tensor, index: torch.Tensor, dst_gate: torch.Tensor,
               src_gate: torch.Tensor, src_feat: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Add the gated sum to ``out`` (float32, ``(num_dst, d)``, unit column stride, rows not overlapping).

    Destination ``v`` sums the sources ``index[starts[v]:stops[v]]`` (int64, checked by the caller);
    ``dst_gate`` has ``num_dst`` rows, ``src_gate`` and ``src_feat`` one row per source; all on ``out``'s device,
    with unit column stride.
    """
    num_dst, dim = out.shape
    if num_dst == 0 or dim == 0:
        return out
    block_d = min(GATED_BLOCK_D, triton.next_power_of_2(dim))
    grid = (num_dst, triton.cdiv(dim, block_d))
    _launch("_gated_sum_kernel", out.device, grid, starts, stops, index, dst_gate, src_gate, src_feat, out,
            dst_gate.stride(0), src_gate.stride(0), src_feat.stride(0), out.stride(0), dim, BLOCK_E=BLOCK_E,
            BLOCK_D=block_d, num_warps=4)
    return out


def residual_update_(h: torch.Tensor, conv: torch.Tensor, norm: torch.nn.BatchNorm1d) -> torch.Tensor:
    """``h += normalize(relu(norm(conv)))`` row by row, ``norm`` in eval mode with running statistics;
    ``h`` float32 with unit column stride (updated in place and returned), ``conv`` any float dtype."""
    rows, dim = h.shape
    if rows == 0 or dim == 0:
        return h
    weight, bias = norm.weight, norm.bias
    block_d = triton.next_power_of_2(dim)
    _launch("_residual_update_kernel", h.device, (rows,), h, conv, norm.running_mean, norm.running_var,
            norm.running_mean if weight is None else weight, norm.running_mean if bias is None else bias,
            h.stride(0), conv.stride(0), dim, float(norm.eps), ROW_NORM_EPS, HAS_WEIGHT=weight is not None,
            HAS_BIAS=bias is not None, BLOCK_D=block_d, num_warps=4 if block_d <= 1024 else 8)
    return h
