"""The edge layouts the CPU kernels read: a graph's edges sorted by destination and by source (CSR), built once
per graph object and cached on it.

Two layouts, for two kinds of kernel:

* :class:`GatedCSR`, the gated sum's (:mod:`.gated_sum`, and the Triton kernel's of :mod:`.gpu`): sources by
  destination, built with torch's stable sort, so that it exists on a machine without the compiled kernels (the
  Triton path needs it on CUDA); the by-source direction is built only when a backward pass first reads it
  (layer-wise inference on a graph of millions of edges never does).
* :class:`EdgeCSR`, the neighbour sums' (:mod:`.relu_sum`, :mod:`.edge_gated_sum`, :mod:`.u_sum`): both
  directions with their edge ids, from one counting sort per direction in C++ (``csrc/edge_csr.cpp``), read by
  the kernels as one list (``csrc/edge_csr.h``). A training batch is a new graph every step, so this build is
  part of every step: the counting sort is what makes it cheap.

Both are stable (edge-id order within a node), int64, on the CPU.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl.kernels.csr import GatedCSR
>>> g = dgl.graph(([0, 1, 2], [1, 2, 1]))
>>> layout = GatedCSR.of(g)
>>> layout.dst_indptr.tolist(), layout.dst_index.tolist()
([0, 0, 2, 3], [0, 2, 1])
>>> GatedCSR.of(g) is layout  # cached on the graph object
True
"""
from __future__ import annotations

import functools

import torch

from ..utils.graph_cache import cached_on_graph
from . import cpu

__all__ = ["EdgeCSR", "GatedCSR", "check_gated_operands", "csr", "edge_layout"]


def csr(rows: torch.Tensor, cols: torch.Tensor, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indptr, cols sorted by row, stably)``: the CSR the kernels read (int64 on the CPU)."""
    order = torch.argsort(rows, stable=True)
    indptr = torch.zeros(num_rows + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(torch.bincount(rows, minlength=num_rows), 0)
    return indptr, cols[order].contiguous()


def edge_layout(graph, name: str, build):
    """``build(src, dst, num_src, num_dst)`` of ``graph``'s edges (int64, CPU), made once per graph object
    (:func:`gpse_dgl.utils.graph_cache.cached_on_graph`): the kernels' CSR layouts are built per graph, not per
    call."""
    def from_edges():
        src, dst = graph.edges()
        return build(src.to(torch.int64).cpu(), dst.to(torch.int64).cpu(), graph.num_src_nodes(),
                     graph.num_dst_nodes())

    return cached_on_graph(graph, name, None, from_edges)


class GatedCSR:
    """A graph's edges sorted by destination (forward) and, when a backward pass first needs them, by
    source (stable: edge-id order within each node), as the gated-sum kernels read them; built once per graph
    object (:meth:`of`)."""

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, num_src: int, num_dst: int):
        self.dst_indptr, self.dst_index = csr(dst, src, num_dst)
        self.num_src, self.num_dst = num_src, num_dst
        self._edges = (src, dst)

    @functools.cached_property
    def by_source(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(indptr, destinations)`` of each source's out-edges: only gradients read them."""
        src, dst = self._edges
        return csr(src, dst, self.num_src)

    @classmethod
    def of(cls, graph) -> "GatedCSR":
        return edge_layout(graph, "gated_csr", cls)


def check_gated_operands(layout, dst_gate: torch.Tensor, src_gate: torch.Tensor, src_feat: torch.Tensor,
                         out: torch.Tensor | None) -> None:
    """Raise a ValueError unless the gated sum's operands fit ``layout`` (its ``num_src`` and ``num_dst``):
    ``dst_gate`` one row per destination, ``src_gate`` and ``src_feat`` a row for every source, ``out`` one per
    destination, all of one width. The kernels index rows by the graph's node ids and read past a tensor that is
    too short."""
    dim = src_feat.shape[1]
    if (dst_gate.shape != (layout.num_dst, dim) or src_gate.shape[1] != dim
            or min(src_gate.shape[0], src_feat.shape[0]) < layout.num_src):
        raise ValueError(f"gated_sum on a graph of {layout.num_src} sources and {layout.num_dst} destinations: "
                         f"dst_gate must be ({layout.num_dst}, d), src_gate and src_feat (>= {layout.num_src}, d) "
                         f"with one d; got {tuple(dst_gate.shape)}, {tuple(src_gate.shape)}, {tuple(src_feat.shape)}")
    if out is not None and out.shape != (layout.num_dst, dim):
        raise ValueError(f"out must be ({layout.num_dst}, {dim}), got {tuple(out.shape)}")


class EdgeCSR:
    """A graph's edges as the neighbour-sum kernels read them: the in-edges of each destination
    (``dst_indptr``; their sources ``dst_src`` and edge ids ``dst_eid``) and the out-edges of each source
    (``src_indptr``; ``src_dst``, ``src_eid``). Needs the compiled extension (:func:`gpse_dgl.kernels.cpu.available`);
    built once per graph object (:meth:`of`) and shared by every layer and kernel."""

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, num_src: int, num_dst: int):
        #: the six arrays as the kernels take them, one list (``csrc/edge_csr.h`` reads them by name)
        self.arrays = cpu.require("EdgeCSR").edge_csr(src, dst, num_src, num_dst)
        (self.dst_indptr, self.dst_src, self.dst_eid, self.src_indptr, self.src_dst, self.src_eid) = self.arrays

    @classmethod
    def of(cls, graph) -> "EdgeCSR":
        return edge_layout(graph, "edge_csr", cls)
