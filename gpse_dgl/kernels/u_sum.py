"""The neighbour sum ``out[v] = w x[v] + sum_{u -> v} x[u]`` (GIN's aggregation with its self term, GCN's with
``w = 0``) and the neighbour mean (GraphSAGE's: the sum over the in-degree, 0 without in-edges) with the compiled CPU
kernel.

With torch ops the gather writes every edge's row ``x[u]`` to an ``(E, d)`` tensor and ``index_add_`` sums it;
backward the gradient is gathered per edge again and summed by source. ``csrc/u_sum.cpp`` sums by destination
forward and by source backward, reading each row once per edge and keeping nothing per edge; its autograd
function is C++'s own. Rows are float32 or bfloat16, sums and the result float32; each node's edges are summed
in edge-id order on one thread, so the result does not depend on the number of threads.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl import kernels
>>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
>>> x = torch.randn(3, 4)
>>> out = kernels.run("copy_u_sum", g, x, autograd=True, self_weight=1.0)  # None where the kernel cannot run
>>> out is None or torch.allclose(out[1], x[1] + x[0])
True
"""
from __future__ import annotations

import torch

from . import cpu
from .csr import EdgeCSR

__all__ = ["supports", "u_mean", "u_sum"]

#: The kernel's ``mean`` argument: each sum divided by the in-degree in the same pass, or not.
_SUM, _MEAN = False, True


def supports(graph, x: torch.Tensor) -> bool:
    """Whether the kernel takes these operands: 2-D float32 or bfloat16 rows on the CPU, the kernels built."""
    return cpu.supports(x)


def u_sum(graph, x: torch.Tensor, self_weight: float = 0.0) -> torch.Tensor:
    """``self_weight * x[v] + sum_{u -> v} x[u]`` as float32 ``(num_dst_nodes, d)``, with autograd
    (:func:`supports` must hold)."""
    csr = EdgeCSR.of(graph)
    return cpu.kernel().u_sum(cpu.unit_stride_rows(x), float(self_weight), _SUM, csr.arrays)


def u_mean(graph, x: torch.Tensor) -> torch.Tensor:
    """``mean_{u -> v} x[u]`` (0 without in-edges) as float32 ``(num_dst_nodes, d)``, with autograd: the sum of
    :func:`u_sum` divided in the same pass (:func:`supports` must hold)."""
    csr = EdgeCSR.of(graph)
    return cpu.kernel().u_sum(cpu.unit_stride_rows(x), 0.0, _MEAN, csr.arrays)
