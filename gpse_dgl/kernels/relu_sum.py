"""GINE's aggregation ``out[v] = w x[v] + sum_{e = (u, v)} relu(x[u] + ef[e])`` with the compiled CPU kernel.

With torch ops every edge's message ``relu(x[u] + ef[e])`` is a row of an ``(E, d)`` tensor: the gather
writes it, the add and the ReLU read and write it, the sum reads it, and autograd keeps it (and the gather's
copy) for the backward pass. ``csrc/relu_sum.cpp`` reads ``x[u]`` and ``ef[e]`` once per edge and sums in
registers, by destination; backward, in one pass by source, it writes the edge features' gradient
``grad_ef[e] = grad_out[v] * (x[u] + ef[e] > 0)`` and adds each row to ``grad_x[u]`` as it goes (no atomics: a
source's edges are one thread's), with ``w grad_out[u]`` for GINE's self term ``w = 1 + eps``. Nothing per edge
is kept from forward to backward but the inputs themselves. The autograd function is C++'s own: on a batch of
small molecules the Python of a ``torch.autograd.Function`` cost more than its kernels. Rows are float32 or
bfloat16, sums float32 (the low-precision contract of :mod:`gpse_dgl.nn.ops`), the result float32;
each node's edges are summed in edge-id order on one thread, so the result does not depend on the number of
threads.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl import kernels
>>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
>>> x, ef = torch.randn(3, 4), torch.randn(3, 4)
>>> out = kernels.run("relu_sum", g, x, ef, autograd=True)  # None where the kernel cannot run
>>> out is None or torch.allclose(out[1], torch.relu(x[0] + ef[0]))
True
"""
from __future__ import annotations

import torch

from . import cpu
from .csr import EdgeCSR

__all__ = ["relu_sum", "supports"]


def supports(graph, x: torch.Tensor, edge_feat: torch.Tensor) -> bool:
    """Whether the kernel takes these operands: 2-D float32 or bfloat16 rows of one dtype on the CPU, the
    kernels built."""
    return cpu.supports(x, edge_feat) and x.shape[1] == edge_feat.shape[1]


def relu_sum(graph, x: torch.Tensor, edge_feat: torch.Tensor, self_weight: float = 0.0) -> torch.Tensor:
    """``out[v] = self_weight * x[v] + sum_{e = (u, v)} relu(x[u] + edge_feat[e])`` as float32
    ``(num_dst_nodes, d)``, with autograd (:func:`supports` must hold)."""
    csr = EdgeCSR.of(graph)
    return cpu.kernel().relu_sum(cpu.unit_stride_rows(x), cpu.unit_stride_rows(edge_feat), float(self_weight),
                                 csr.arrays)
