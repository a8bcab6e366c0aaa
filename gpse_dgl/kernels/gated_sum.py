"""The gated sum ``out[v] = sum_{e = (u, v)} sigmoid(k[v] + q[u]) * val[u]`` with the compiled CPU kernel.

With plain torch ops (:func:`gpse_dgl.nn.ops.gated_sum`) every edge's gate and message is a row of an
``(E, d)`` tensor that is written and read again several times; ``csrc/gated_sum.cpp`` reads the two source
rows an edge needs once and keeps the rest in registers (one pass by destination forward; backward one pass by
destination and one by source, the gates recomputed, no atomics). Rows are read as float32 or bfloat16 (half the
bytes); gates, messages and sums are float32, as on the torch path (the low-precision contract of
:mod:`gpse_dgl.nn.ops`). The gate is computed as ``1 / (1 + exp(-k[v]) exp(-q[u]))`` from factors computed once per
row (:func:`factors`), so an edge costs no exponential; rows with entries too large for that form are flagged and
their edges take ``sigmoid(k + q)`` itself. A destination with more than 16,384 in-edges (a virtual node has one
from every node) is summed by every thread, in pieces of 4,096 edges fixed by its edge count, so the result does
not depend on the number of threads. The edges are read from :class:`~gpse_dgl.kernels.csr.GatedCSR`; layer-wise
inference on large graphs sums by column blocks instead (:mod:`.gated_sum_packed`).

Example
-------
>>> import dgl, torch
>>> from gpse_dgl import kernels
>>> g = dgl.graph(([0, 1], [1, 1]))
>>> k, q, v = torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4)
>>> out = kernels.run("gated_sum", g, k, q, v)  # None where no kernel takes the operands
>>> out is None or torch.allclose(out[1], (torch.sigmoid(k[1] + q) * v).sum(0), atol=1e-6)
True
"""
from __future__ import annotations

import weakref

import torch

from .._private import tensor_version
from ..utils import memory
from . import cpu
from .csr import GatedCSR, check_gated_operands

__all__ = ["accumulates_in_place", "factors", "gated_sum", "supports"]


def supports(graph, dst_gate: torch.Tensor, src_gate: torch.Tensor, src_feat: torch.Tensor) -> bool:
    """Whether the kernel takes these operands: 2-D float32 or bfloat16 rows of one dtype on the CPU, the
    kernels built."""
    return cpu.supports(dst_gate, src_gate, src_feat)


def factors(x: torch.Tensor, keep: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(exp(-x), flags)``: the gate factors of the rows of ``x`` in its dtype (the kernel computes
    ``sigmoid(k + q)`` as ``1 / (1 + exp(-k) exp(-q))``) and one uint8 per row, 1 where an entry is too
    large for that form (its edges take ``sigmoid(k + q)`` itself). For bf16 rows the factors are stored
    in bf16 too: a gate then carries bf16's rounding of ``exp(-q)`` (at most ~1e-3), where before it
    carried the rounding of ``q`` itself; both within the bf16 contract of ``tests/test_precision.py``.

    With ``keep`` the factors of the last tensor asked for are kept while that tensor lives and is
    unchanged (its version counter; ``.data`` edits are not seen, as autograd does not see them): gated sums
    over chunks of destinations with the same sources (layer-wise inference where packing its sources would
    not fit in memory, :mod:`gpse_dgl.encode.large_graph`) compute them once per layer. Training does not
    keep them (they would live as long as the saved activations), nor does inference mode (its tensors have
    no version counter).
    """
    keep = keep and not x.is_inference()
    kept = _kept.get("tensor")
    if keep and kept is not None and kept() is x and _kept["version"] == tensor_version(x):
        return _kept["factors"]
    if keep:
        _kept.clear()  # the stale factors go before the new ones are allocated: one buffer at a time at most
    module = cpu.require("gated_sum.factors")
    factor = memory.empty(tuple(x.shape), dtype=x.dtype)  # read in random order, like the rows themselves
    flags = torch.empty(x.shape[0], dtype=torch.uint8)
    module.gated_sum_factors(x, factor, flags)
    if keep:
        _kept.update(tensor=weakref.ref(x), version=tensor_version(x), factors=(factor, flags))
        weakref.finalize(x, _forget)  # the factors go when the tensor goes
    return factor, flags


#: The factors kept by :func:`factors` (one tensor's at a time).
_kept: dict = {}


def _forget() -> None:
    """Drop the kept factors if their tensor is gone (another tensor's may have taken the slot since)."""
    kept = _kept.get("tensor")
    if kept is not None and kept() is None:
        _kept.clear()


def accumulates_in_place(out: torch.Tensor) -> bool:
    """Whether a kernel can add its float32 sums into ``out`` where it is
    (:func:`gpse_dgl.kernels.cpu.distinct_rows`)."""
    return out.dtype == torch.float32 and cpu.distinct_rows(out)


class _NativeGatedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dst_gate, src_gate, src_feat, csr):
        ctx.csr = csr
        ctx.save_for_backward(dst_gate, src_gate, src_feat)
        out = torch.zeros((csr.num_dst, src_feat.shape[1]), dtype=torch.float32)
        cpu.kernel().gated_sum_forward(csr.dst_indptr, csr.dst_index, dst_gate, src_gate, src_feat,
                                       *factors(src_gate), out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        dst_gate, src_gate, src_feat = ctx.saved_tensors
        csr, module = ctx.csr, cpu.kernel()
        grad_out = grad_out.to(torch.float32).contiguous()
        need_k, need_q, need_v = ctx.needs_input_grad[:3]
        grad_k = grad_q = grad_v = None
        # The kernels sum in float32 and write every row once in the rows' dtype: no zero fill, no cast after.
        if need_k:
            grad_k = torch.empty((csr.num_dst, dst_gate.shape[1]), dtype=dst_gate.dtype)
            module.gated_sum_grad_key(csr.dst_indptr, csr.dst_index, dst_gate, src_gate, src_feat,
                                      *factors(src_gate), grad_out, grad_k)
        if need_q or need_v:
            shape = (csr.num_src, src_feat.shape[1])
            grad_q = torch.empty(shape, dtype=src_gate.dtype) if need_q else None
            grad_v = torch.empty(shape, dtype=src_feat.dtype) if need_v else None
            module.gated_sum_grad_source(*csr.by_source, dst_gate, src_gate, src_feat, *factors(dst_gate), grad_out,
                                         grad_q, grad_v)
        return grad_k, grad_q, grad_v, None


def gated_sum(graph, dst_gate: torch.Tensor, src_gate: torch.Tensor, src_feat: torch.Tensor,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """The gated sum with the fused kernel (:func:`supports` must hold); float32 result. ``out``
    (float32) is added to: in place without autograd (rows a stride apart, such as a column slice of a
    wider projection, are written where they are)."""
    csr = GatedCSR.of(graph)
    check_gated_operands(csr, dst_gate, src_gate, src_feat, out)
    dst_gate, src_gate, src_feat = (cpu.unit_stride_rows(t) for t in (dst_gate, src_gate, src_feat))
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (dst_gate, src_gate, src_feat))
    if needs_grad:
        return _NativeGatedSum.apply(dst_gate, src_gate, src_feat, csr)
    target = out
    if out is None or not accumulates_in_place(out):
        target = torch.zeros((csr.num_dst, src_feat.shape[1]), dtype=torch.float32)
    cpu.kernel().gated_sum_forward(csr.dst_indptr, csr.dst_index, dst_gate, src_gate, src_feat,
                                   *factors(src_gate, keep=True), target)
    return target if out is None or target is out else out.add_(target)
