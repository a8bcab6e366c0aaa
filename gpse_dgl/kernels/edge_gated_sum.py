r"""GatedGCN's aggregation with edge gates (the downstream ``GatedGCNLayer``) with the compiled CPU kernel.

.. math::

    \hat e_{uv} = g^{dst}_v + g^{src}_u + g^{edge}_{uv}, \qquad
    \mathit{out}_v = \frac{\sum_{u \to v} \sigma(\hat e_{uv}) \odot x_u}
                          {\sum_{u \to v} \sigma(\hat e_{uv}) + \epsilon}

(:math:`x` = ``src_feat``; :math:`g` the three gate terms). With torch ops the gather of each gate term, their sum,
the sigmoid, the gathered values, their product and the two sums are each an ``(E, d)`` tensor written and read
again, forward and backward, each with its autograd node. ``csrc/edge_gated_sum.cpp`` reads the rows an edge needs
once, writes the logits :math:`\hat e` (which the layer returns as its new edge features) and sums gates and
messages in registers by destination; backward it makes one pass by destination and one by source, the gates
recomputed from the logits, no atomics. Its autograd function is C++'s own. Rows are float32 or bfloat16 (a column
slice of a wider projection too), logits and sums float32; each node's edges are summed in edge-id order on one
thread, so the result does not depend on the number of threads.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl import kernels
>>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
>>> src_feat, dst_gate, src_gate, edge_gate = (torch.randn(3, 4) for _ in range(4))
>>> result = kernels.run("edge_gated_sum", g, src_feat, dst_gate, src_gate, edge_gate, autograd=True, eps=1e-6)
>>> result is None or torch.allclose(result[1][0], dst_gate[1] + src_gate[0] + edge_gate[0])
True
"""
from __future__ import annotations

import torch

from . import cpu
from .csr import EdgeCSR

__all__ = ["edge_gated_sum", "supports"]


def supports(graph, src_feat: torch.Tensor, dst_gate: torch.Tensor, src_gate: torch.Tensor,
             edge_gate: torch.Tensor) -> bool:
    """Whether the kernel takes these operands: 2-D float32 or bfloat16 rows of one dtype and width on the CPU, the
    kernels built."""
    operands = (src_feat, dst_gate, src_gate, edge_gate)
    return cpu.supports(*operands) and all(t.shape[1] == src_feat.shape[1] for t in operands)


def edge_gated_sum(graph, src_feat: torch.Tensor, dst_gate: torch.Tensor, src_gate: torch.Tensor,
                   edge_gate: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, logits)`` as float32 ``(num_dst_nodes, d)`` and ``(E, d)``, with autograd (:func:`supports` must
    hold)."""
    csr = EdgeCSR.of(graph)
    rows = (cpu.unit_stride_rows(t) for t in (src_feat, dst_gate, src_gate, edge_gate))
    out, logits = cpu.kernel().edge_gated_sum(*rows, float(eps), csr.arrays)
    return out, logits
