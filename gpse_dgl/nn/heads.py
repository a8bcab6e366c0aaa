"""Prediction heads: GPSE's pretraining heads and those of the downstream models.

* :class:`GPSEHeads` - the pretraining heads on GPSE's encodings: one small MLP per node-level target
  column, one MLP on the pooled graph representation for the graph-level targets.

Downstream heads (GraphGym ``layers_post_mp`` semantics):

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

import math
from typing import Any

import torch
from torch import nn
import torch.nn.functional as F

from ..utils.precision import to_accumulation
from . import ops
from .dropout import Dropout
from .virtual_node import VirtualNodeInfo, pool

__all__ = ["GPSEHeads", "GPSE_POOLINGS", "post_mp_mlp", "GraphHead", "NodeHead", "POOLINGS"]

#: Readouts of the downstream heads.
POOLINGS = ("sum", "mean", "max")
#: Readouts of GPSE's graph head over real and virtual nodes (``add`` is PyG's name for ``sum``).
GPSE_POOLINGS = {"sum": "sum", "add": "sum", "mean": "mean", "max": "max"}


class GPSEHeads(nn.Module):
    r"""GPSE pretraining heads.

    Node head ``k`` (one per node-level target column, applied to the real nodes):

    .. math::
        \hat y_{ik} = w_k^\top \mathrm{normalize}\big(\mathrm{ReLU}(\mathrm{Dropout}(A_k h_i + a_k))\big)
            + c_k, \qquad A_k \in \mathbb{R}^{H \times D}

    Graph head on the pooled states :math:`p_b` of graph :math:`b` (all real nodes plus the virtual
    node, sum pooling by default):

    .. math::
        \hat z_b = W_2\,\mathrm{normalize}\big(\mathrm{ReLU}(\mathrm{Dropout}(W_1 p_b + b_1))\big) + b_2

    This is PyG's ``GNNInductiveHybridMultiHead`` with ``layers_post_mp=2``, no BatchNorm, L2 norm on.
    The node heads are evaluated together: the first layers as one ``(K*H) x D`` product, the second as
    a batched dot product (same arithmetic as ``K`` separate MLPs).

    Parameters
    ----------
    dim_in : int
        Encoder width ``D``. Default 512.
    num_node_targets : int
        Node-level target columns ``K``. Default 51.
    num_graph_targets : int
        Graph-level target columns. Default 11.
    node_hidden : int
        Hidden width ``H`` of every node head. Default 32.
    graph_hidden : int
        Hidden width of the graph head. Default 512.
    dropout : float
        Dropout in the hidden layers. Default 0.2.
    pooling : str
        ``"sum"`` (alias ``"add"``), ``"mean"`` or ``"max"`` over real nodes and the virtual node.

    Example
    -------
    >>> import torch
    >>> from gpse_dgl.nn.heads import GPSEHeads
    >>> from gpse_dgl.nn.virtual_node import VirtualNodeInfo
    >>> heads = GPSEHeads(dim_in=8, num_node_targets=3, num_graph_targets=2, node_hidden=4, graph_hidden=8)
    >>> info = VirtualNodeInfo(3, 1, 1, torch.tensor([3]), torch.tensor([0, 0, 0, 0]))
    >>> node_pred, graph_pred = heads(torch.randn(4, 8), info)
    >>> node_pred.shape, graph_pred.shape
    (torch.Size([3, 3]), torch.Size([1, 2]))
    """

    def __init__(self, dim_in: int = 512, num_node_targets: int = 51, num_graph_targets: int = 11,
                 node_hidden: int = 32, graph_hidden: int = 512, dropout: float = 0.2, pooling: str = "sum"):
        super().__init__()
        if pooling not in GPSE_POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; choose sum, mean or max")
        self.dim_in = int(dim_in)
        self.num_node_targets = int(num_node_targets)
        self.num_graph_targets = int(num_graph_targets)
        self.node_hidden = int(node_hidden)
        self.graph_hidden = int(graph_hidden)
        self.pooling = pooling
        k, h, d = self.num_node_targets, self.node_hidden, self.dim_in
        self.node_hidden_weight = nn.Parameter(torch.empty(k, h, d))
        self.node_hidden_bias = nn.Parameter(torch.empty(k, h))
        self.node_out_weight = nn.Parameter(torch.empty(k, h))
        self.node_out_bias = nn.Parameter(torch.empty(k))
        self.graph_hidden_layer = nn.Linear(d, self.graph_hidden)
        self.graph_out = nn.Linear(self.graph_hidden, self.num_graph_targets)
        self.dropout = Dropout(float(dropout))
        self.reset_parameters()

    def to_config(self) -> dict[str, Any]:
        return {"dim_in": self.dim_in, "num_node_targets": self.num_node_targets,
                "num_graph_targets": self.num_graph_targets, "node_hidden": self.node_hidden,
                "graph_hidden": self.graph_hidden, "dropout": self.dropout.p, "pooling": self.pooling}

    @classmethod
    def from_config(cls, config: dict[str, Any] | None = None) -> "GPSEHeads":
        return cls(**dict(config or {}))

    def reset_parameters(self):
        """``torch.nn.Linear`` initialisation for every head (uniform in :math:`\\pm 1/\\sqrt{fan_{in}}`)."""
        b1 = 1.0 / math.sqrt(self.dim_in) if self.dim_in else 0.0
        b2 = 1.0 / math.sqrt(self.node_hidden) if self.node_hidden else 0.0
        nn.init.uniform_(self.node_hidden_weight, -b1, b1)
        nn.init.uniform_(self.node_hidden_bias, -b1, b1)
        nn.init.uniform_(self.node_out_weight, -b2, b2)
        nn.init.uniform_(self.node_out_bias, -b2, b2)
        self.graph_hidden_layer.reset_parameters()
        self.graph_out.reset_parameters()

    def node_forward(self, h_real: torch.Tensor) -> torch.Tensor:
        """``(N, D)`` encodings of real nodes -> ``(N, K)`` node-level predictions."""
        k, hd, d = self.num_node_targets, self.node_hidden, self.dim_in
        z = F.linear(h_real, self.node_hidden_weight.reshape(k * hd, d), self.node_hidden_bias.reshape(k * hd))
        z = F.relu(self.dropout(to_accumulation(z))).view(-1, k, hd)  # float32 norms under autocast
        z = F.normalize(z, p=2.0, dim=2)
        return (z * self.node_out_weight).sum(-1) + self.node_out_bias

    def graph_forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """``(B, D)`` pooled states -> ``(B, num_graph_targets)`` graph-level predictions."""
        z = F.relu(self.dropout(to_accumulation(self.graph_hidden_layer(pooled))))  # float32 norm under autocast
        return to_accumulation(self.graph_out(F.normalize(z, p=2.0, dim=1)))

    def forward(self, h: torch.Tensor, info: VirtualNodeInfo) -> tuple[torch.Tensor, torch.Tensor]:
        """``h`` from :meth:`GPSE.forward_all` -> ``(node_pred (N, K), graph_pred (B, num_graph_targets))``."""
        return self.node_forward(info.real(h)), self.graph_forward(pool(h, info, GPSE_POOLINGS[self.pooling]))


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


def reset_linears(mlp: nn.Sequential) -> None:
    """Draw the weights of every linear layer of ``mlp`` (:func:`post_mp_mlp`'s) again."""
    for layer in mlp:
        if isinstance(layer, nn.Linear):
            layer.reset_parameters()


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
        reset_linears(self.mlp)

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
        reset_linears(self.mlp)

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        return self.mlp(feat)
