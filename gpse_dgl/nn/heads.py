"""Prediction heads for downstream models (GraphGym ``layers_post_mp`` semantics).

* :func:`post_mp_mlp` - ``layers_post_mp - 1`` hidden ``Linear + ReLU`` layers, then a plain ``Linear``.
  ``halving=True`` gives GraphGPS's ``san_graph`` head, whose hidden widths halve at every layer
  (``dim_in -> dim_in/2 -> dim_in/4 -> ... -> dim_out``).
* :class:`GraphHead` - per-graph ``sum``/``mean``/``max`` pooling of a batched graph, then the MLP.
* :class:`NodeHead` - the MLP on every node.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl.nn.heads import GraphHead
>>> g = dgl.batch([dgl.graph(([0], [1])), dgl.graph(([0, 1], [1, 2]))])
>>> GraphHead(8, 3, pooling="mean", layers_post_mp=3, halving=True)(g, torch.randn(5, 8)).shape
torch.Size([2, 3])
"""
from __future__ import annotations

import torch
from torch import nn

from . import ops

POOLINGS = ("sum", "mean", "max")


def post_mp_mlp(dim_in: int, dim_out: int, layers_post_mp: int = 1, halving: bool = False) -> nn.Sequential:
    """``layers_post_mp`` linear layers with ReLU between them (none after the last).

    Hidden width is ``dim_in`` (GraphGym) or halves each layer (``halving=True``, GraphGPS ``san_graph``).
    """
    if layers_post_mp < 1:
        raise ValueError(f"layers_post_mp must be >= 1, got {layers_post_mp}")
    widths = [dim_in]
    for depth in range(1, layers_post_mp):
        widths.append(max(1, dim_in // 2 ** depth) if halving else dim_in)
    layers = []
    for width_in, width_out in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], dim_out))
    return nn.Sequential(*layers)


class GraphHead(nn.Module):
    """Graph-level prediction: pool node features per graph, then :func:`post_mp_mlp`.

    Parameters
    ----------
    dim_in, dim_out : int
        Node feature width and number of predicted values per graph.
    pooling : {"sum", "mean", "max"}
        Per-graph readout (``"add"`` is accepted as PyG's name for ``"sum"``).
    layers_post_mp : int
        Number of linear layers after pooling.
    halving : bool
        Halve the hidden width at each layer (GraphGPS ``san_graph`` head).

    ``forward(graph, feat) -> (graph.batch_size, dim_out)``.
    """

    def __init__(self, dim_in: int, dim_out: int, pooling: str = "mean", layers_post_mp: int = 1,
                 halving: bool = False):
        super().__init__()
        pooling = "sum" if pooling == "add" else pooling
        if pooling not in POOLINGS:
            raise ValueError(f"unknown graph pooling {pooling!r}; choose one of {POOLINGS}")
        self.pooling = pooling
        self.mlp = post_mp_mlp(dim_in, dim_out, layers_post_mp, halving)

    def reset_parameters(self):
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        return self.mlp(ops.readout(graph, feat, self.pooling))


class NodeHead(nn.Module):
    """Node-level prediction: :func:`post_mp_mlp` on every node (GraphGym ``inductive_node``).

    ``forward(graph, feat) -> (num_nodes, dim_out)``; ``graph`` is unused (uniform head signature).
    """

    def __init__(self, dim_in: int, dim_out: int, layers_post_mp: int = 1, halving: bool = False):
        super().__init__()
        self.mlp = post_mp_mlp(dim_in, dim_out, layers_post_mp, halving)

    def reset_parameters(self):
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        return self.mlp(feat)
