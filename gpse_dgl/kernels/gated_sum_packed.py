"""The gated sum of layer-wise inference on large graphs, from sources packed by blocks of columns.

Layer-wise inference (:mod:`gpse_dgl.encode.large_graph`) sums every destination of a large graph with one
layer's sources. By rows (:mod:`.gated_sum`), each edge reads two rows of ``2 x d`` floats from memory, and the
rows are far larger than the cache. Packed, each block of 64 bytes of columns holds every source's gate factor
``exp(-src_gate)`` and feature in one 128-byte record (:func:`pack_sources`), and one block of every source fits in the
last-level cache while all the edges read it (:func:`packed_gated_sum`, ``csrc/gated_sum_packed.cpp``). The
sums agree with the row kernel's to float rounding: the same arithmetic, edges in the same order.

Example
-------
>>> import torch
>>> from gpse_dgl.kernels import cpu, gated_sum_packed
>>> not cpu.available() or gated_sum_packed.packed_shape(1000, 256, torch.float32) == (16, 1000, 32)
True
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import cpu
from .gated_sum import accumulates_in_place

__all__ = ["PackedSources", "pack_sources", "packed_gated_sum", "packed_shape"]


@dataclass(frozen=True)
class PackedSources:
    """One layer's sources packed for :func:`packed_gated_sum` by :func:`pack_sources`: ``slab`` holds, for each
    block of 64 bytes of columns (16 float32 or 32 bf16), every source's gate factors ``exp(-src_gate)`` and
    ``src_feat`` in one 128-byte record (the gate itself for a flagged row); ``flags`` has one uint8 per row, as
    :func:`~gpse_dgl.kernels.gated_sum.factors`; ``src_gate`` are the gate rows packed (read by the direct form).
    The slab is a copy: pack again after writing to the sources' gates or features."""

    src_gate: torch.Tensor
    slab: torch.Tensor
    flags: torch.Tensor


def packed_shape(num_rows: int, dim: int, dtype: torch.dtype) -> tuple:
    """The shape of the slab :func:`pack_sources` fills for ``num_rows`` rows of width ``dim``:
    ``(blocks, num_rows, 2 * lanes)`` with ``lanes`` = 64 bytes of ``dtype`` (padded past ``dim``)."""
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"packed sources are float32 or bfloat16, not {dtype}")
    return tuple(cpu.require("packed_shape").gated_sum_packed_shape(num_rows, dim, dtype.itemsize))


def pack_sources(src_gate: torch.Tensor, src_feat: torch.Tensor, out: torch.Tensor) -> PackedSources:
    """Pack the sources of a gated sum into ``out``, a slab of :func:`packed_shape` in their dtype (kept by the
    caller from layer to layer), for :func:`packed_gated_sum` (:func:`gpse_dgl.kernels.cpu.supports` must hold for
    both)."""
    if (not cpu.supports(src_gate, src_feat) or out.device.type != "cpu" or out.dtype != src_gate.dtype
            or out.shape != packed_shape(src_gate.shape[0], src_gate.shape[1], src_gate.dtype)):
        raise ValueError("pack_sources needs float32 or bfloat16 rows on the CPU, the compiled kernels, and a slab "
                         "of packed_shape() in their dtype")
    flags = torch.empty(src_gate.shape[0], dtype=torch.uint8)
    cpu.kernel().gated_sum_pack(src_gate, src_feat, out, flags)
    return PackedSources(src_gate, out, flags)


def packed_gated_sum(indptr: torch.Tensor, index: torch.Tensor, dst_gate: torch.Tensor, sources: PackedSources,
                     out: torch.Tensor) -> None:
    """``out[v] += sum_{e = (u, v)} sigmoid(dst_gate[v] + src_gate[u]) * src_feat[u]`` from packed sources,
    without autograd.

    ``indptr``/``index``: the in-edges by destination (CSR, int64: ``index[indptr[v]:indptr[v + 1]]`` are the
    sources of destination ``v``); ``dst_gate``: the destinations' gates, in the sources' dtype; ``out``: float32
    with contiguous rows (a column slice included), added to in place.
    """
    if not accumulates_in_place(out):
        raise ValueError("packed_gated_sum adds into float32 rows that do not overlap "
                         "(a 2-D tensor, unit column stride)")
    cpu.require("packed_gated_sum").gated_sum_packed_forward(indptr, index, dst_gate, sources.src_gate, sources.slab,
                                                             sources.flags, out)
