"""GCN convolution (Kipf & Welling 2017) through :mod:`gpse_dgl.nn.ops`."""
from __future__ import annotations

import torch
from torch import nn

from .. import ops
from .layer_utils import with_self_loops


class GCNConv(nn.Module):
    r"""Graph convolution with symmetric normalisation and self-loops.

    .. math:: H' = \tilde D_{in}^{-1/2}\, \tilde A\, \tilde D_{out}^{-1/2}\, H W + b,
              \qquad \tilde A = A + I

    where the degrees count the added self-loop. On an undirected graph this is the usual
    :math:`\tilde D^{-1/2} \tilde A \tilde D^{-1/2} H W`. Equals ``dgl.nn.GraphConv(norm="both")`` on
    ``dgl.add_self_loop(graph)`` (for a graph without self-loops; existing ones are replaced by one).
    On a message-flow block, destination node ``i`` gets a self-loop from source node ``i``.

    Parameters
    ----------
    in_feats, out_feats : int
        Input and output widths.
    bias : bool
        Learn an additive bias.
    add_self_loops : bool
        Use :math:`A + I` (``True``) or :math:`A` (``False``; nodes without edges then get 0).
    backend : str, optional
        Message-passing backend (see :mod:`gpse_dgl.nn.ops`).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models.gcn_layer import GCNConv
    >>> g = dgl.graph(([0, 1, 1, 2], [1, 0, 2, 1]))
    >>> GCNConv(4, 8)(g, torch.randn(3, 4)).shape
    torch.Size([3, 8])
    """

    def __init__(self, in_feats: int, out_feats: int, bias: bool = True, add_self_loops: bool = True,
                 backend: str | None = None):
        super().__init__()
        self.in_feats, self.out_feats = in_feats, out_feats
        self.linear = nn.Linear(in_feats, out_feats, bias=bias)
        self.add_self_loops = add_self_loops
        self.backend = backend
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.linear.weight)  # DGL's / PyG's initialisation
        if self.linear.bias is not None:
            nn.init.zeros_(self.linear.bias)

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        """``(graph or block, (N_src, in_feats)) -> (N_dst, out_feats)``."""
        if self.add_self_loops:
            graph = with_self_loops(graph)
        src_norm = ops.out_degrees(graph, feat.device).clamp(min=1).to(feat.dtype).pow(-0.5)
        dst_norm = ops.in_degrees(graph, feat.device).clamp(min=1).to(feat.dtype).pow(-0.5)
        h = feat * src_norm.unsqueeze(-1)
        # The aggregation and the weight commute: multiply first when it makes messages narrower.
        if self.in_feats > self.out_feats:
            h = ops.copy_u_sum(graph, h @ self.linear.weight.t(), backend=self.backend)
        else:
            h = ops.copy_u_sum(graph, h, backend=self.backend) @ self.linear.weight.t()
        h = h * dst_norm.unsqueeze(-1)
        return h + self.linear.bias if self.linear.bias is not None else h
