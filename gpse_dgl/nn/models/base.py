"""Skeleton shared by all downstream models: input encoders -> pre-MP -> layer stack -> head.

:class:`GraphModel` is the skeleton; :class:`ConvStack` is a GraphModel whose layers are ``num_layers``
:class:`ConvBlock` s around one message-passing convolution each (GCN, GraphSAGE, GIN, GINE, GATv2 differ
only in that convolution).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..batch_norm import BatchNorm1d, batch_norm_act
from ..feature_encoders import ConstantEncoder, build_feature_encoder
from ..heads import GraphHead, NodeHead
from ..pe_encoder import NodeEncoderWithPE, PEEncoder
from .layer_utils import dst_features, layer_graphs, reset_submodules

TASK_LEVELS = ("graph", "node")


class GraphModel(nn.Module):
    r"""Base class of the downstream models (GraphGym / GraphGPS layout).

    .. math::
        h^{(0)} = \mathrm{PreMP}\big([\mathrm{NodeEnc}(x) \,\|\, \mathrm{PEEnc}(pe)]\big),\quad
        (h^{(l)}, e^{(l)}) = \mathrm{Layer}_l(G, h^{(l-1)}, e^{(l-1)}),\quad
        y = \mathrm{Head}(G, h^{(L)})

    with :math:`e^{(0)} = \mathrm{EdgeEnc}(x_e)` for models that use edge features.
    Subclasses fill ``self.layers`` (an ``nn.ModuleList`` of ``num_layers`` modules with
    ``forward(graph, feat, edge_feat) -> (feat, edge_feat)``).

    Parameters (common to every model)
    ----------------------------------
    dim_in : int or None
        Node input width for ``node_encoder="linear"``, number of node types for ``"type"``;
        ignored for ``"atom"``, ``"constant"`` and module encoders.
    dim_out : int
        Predicted values per graph (``task_level="graph"``) or per node (``"node"``).
    dim_hidden : int
        Width of every layer (node encoder width + ``pe_encoder.dim_pe``).
    num_layers : int
        Number of message-passing / GPS layers.
    dim_edge : int, optional
        Edge input width for ``edge_encoder="linear"``, number of edge types for ``"type"``.
    dropout : float
        Dropout inside the layers.
    pooling : {"mean", "sum", "max"}
        Graph readout (graph-level only; ``"add"`` means ``"sum"``).
    task_level : {"graph", "node"}
        Prediction level.
    pe_encoder : PEEncoder, optional
        Encodes the per-node ``pe`` passed to ``forward``; its output is concatenated to the node embedding.
    node_encoder : str or nn.Module
        ``"linear"`` (default), ``"atom"``, ``"type"``, ``"constant"`` (graphs without node features:
        pass ``node_feat=None``), or a module with ``dim_hidden - dim_pe`` outputs.
    edge_encoder : str or nn.Module, optional
        For models with edge features: ``"linear"``, ``"bond"``, ``"type"``, ``"constant"`` or a module
        with ``dim_hidden`` outputs. Default: ``"linear"`` when ``dim_edge`` is given, else ``"constant"``.
    layers_pre_mp : int
        ``Linear + ReLU`` layers between the input encoder and the first layer.
    layers_post_mp : int
        Linear layers of the prediction head (see :mod:`gpse_dgl.nn.heads`).
    head_halving : bool
        Halve the head's hidden width at every layer (GraphGPS ``san_graph`` head).
    backend : str, optional
        Message-passing backend for every layer (see :mod:`gpse_dgl.nn.ops`).
    uses_edge_features : bool
        Set by subclasses whose layers read edge features (builds ``self.edge_encoder``).

    Forward
    -------
    ``forward(graph, node_feat, edge_feat=None, pe=None)``

    * ``graph``: a (batched) ``DGLGraph``, or - for models with ``supports_blocks`` and
      ``task_level="node"`` - a list of ``num_layers`` message-flow blocks from a DGL sampler.
    * ``node_feat``: input features of the (source) nodes, or ``None`` with ``node_encoder="constant"``.
    * ``edge_feat``: ``(E, ...)`` edge features for models that use them (``None``: constant encoder);
      models without edge features ignore it, so one training loop can pass it to every model.
    * ``pe``: ``(N, pe_encoder.dim_in)`` raw encoding when the model has a ``pe_encoder``.

    Returns ``(batch_size, dim_out)`` for graph-level tasks, ``(N, dim_out)`` for node-level tasks
    (``N`` = destination nodes of the last block when given blocks).
    """

    #: Whether ``forward`` accepts a list of message-flow blocks (local message passing only).
    supports_blocks = True
    #: Constructor options the class sets itself and refuses from callers (a recipe's value for them
    #: is not passed on), e.g. ``Transformer``'s ``local_mpnn``.
    fixed_options: dict = {}

    def __init__(self, dim_in: int | None, dim_out: int, *, dim_hidden: int = 64, num_layers: int = 3,
                 dim_edge: int | None = None, dropout: float = 0.0, pooling: str = "mean",
                 task_level: str = "graph", pe_encoder: PEEncoder | None = None, node_encoder="linear",
                 edge_encoder=None, layers_pre_mp: int = 0, layers_post_mp: int = 1,
                 head_halving: bool = False, backend: str | None = None, uses_edge_features: bool = False):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if task_level not in TASK_LEVELS:
            raise ValueError(f"unknown task_level {task_level!r}; choose one of {TASK_LEVELS}")
        dim_pe = pe_encoder.dim_pe if pe_encoder is not None else 0
        if dim_pe >= dim_hidden:
            raise ValueError(f"pe_encoder.dim_pe ({dim_pe}) must be smaller than dim_hidden ({dim_hidden})")
        self.dim_hidden, self.num_layers, self.dropout = dim_hidden, num_layers, dropout
        self.task_level, self.backend = task_level, backend

        node_embedding = build_feature_encoder(node_encoder, dim_hidden - dim_pe, dim_in)
        self.input_encoder = NodeEncoderWithPE(node_embedding, pe_encoder)
        self.edge_encoder = None
        if uses_edge_features:
            edge_encoder = edge_encoder or ("linear" if dim_edge else "constant")
            self.edge_encoder = build_feature_encoder(edge_encoder, dim_hidden, dim_edge)
        self.pre_mp = nn.Sequential(*[m for _ in range(layers_pre_mp)
                                      for m in (nn.Linear(dim_hidden, dim_hidden), nn.ReLU())])
        self.layers = nn.ModuleList()  # filled by the subclass
        if task_level == "graph":
            self.head = GraphHead(dim_hidden, dim_out, pooling, layers_post_mp, head_halving)
        else:
            self.head = NodeHead(dim_hidden, dim_out, layers_post_mp, head_halving)

    def reset_parameters(self):
        reset_submodules(self)

    def forward(self, graph, node_feat, edge_feat=None, pe=None) -> torch.Tensor:
        self._check_blocks(graph)
        graphs = layer_graphs(graph, len(self.layers))
        input_graph = graphs[0]
        if node_feat is None and isinstance(self.input_encoder.node_encoder, ConstantEncoder):
            node_feat = input_graph.num_src_nodes()
        h = self.pre_mp(self.input_encoder(node_feat, pe))
        e = self._encode_edges(input_graph, edge_feat)
        for layer, layer_graph in zip(self.layers, graphs):
            h, e = layer(layer_graph, h, e)
        return self.head(graphs[-1], h)

    def _check_blocks(self, graph):
        if not isinstance(graph, (list, tuple)):
            return
        if not self.supports_blocks:
            raise ValueError(f"{type(self).__name__} needs whole graphs; message-flow blocks are not supported")
        if self.task_level != "node":
            raise ValueError("message-flow blocks are only supported for task_level='node'")

    def _encode_edges(self, graph, edge_feat):
        if self.edge_encoder is None:
            return None
        if edge_feat is None:
            if not isinstance(self.edge_encoder, ConstantEncoder):
                raise ValueError(f"{type(self).__name__} was built with an edge encoder: pass edge_feat")
            edge_feat = graph.num_edges()
        return self.edge_encoder(edge_feat)


class ConvStack(GraphModel):
    """A :class:`GraphModel` whose ``num_layers`` layers are :class:`ConvBlock` s (``conv -> BN -> dropout
    -> ReLU`` + residual, GraphGym style) around the convolution ``conv(dim_hidden)`` builds.

    Subclasses pass ``conv`` (a new module per call; it may read ``self.backend``) and, when the
    convolution reads edge features, ``uses_edge_features=True``.

    Parameters
    ----------
    conv : callable
        ``conv(dim_hidden) -> nn.Module`` mapping ``dim_hidden`` node features to ``dim_hidden``.
    batchnorm, residual : bool
        ``BatchNorm1d`` after each convolution; residual connection around each block.
    uses_edge_features : bool
        Encode edge features once and pass them to every convolution.
    **kwargs
        Those of :class:`GraphModel`.
    """

    def __init__(self, dim_in, dim_out, *, conv: Callable[[int], nn.Module], batchnorm: bool = True,
                 residual: bool = True, uses_edge_features: bool = False, **kwargs):
        super().__init__(dim_in, dim_out, uses_edge_features=uses_edge_features, **kwargs)
        d = self.dim_hidden
        self.layers = nn.ModuleList(ConvBlock(conv(d), d, self.dropout, batchnorm, residual, uses_edge_features)
                                    for _ in range(self.num_layers))


class ConvBlock(nn.Module):
    """``conv -> BatchNorm -> Dropout -> ReLU``, plus a residual connection (GraphGym's ``GeneralLayer``
    inside a ``skipsum`` stage). ``forward(graph, feat, edge_feat=None) -> (feat, edge_feat)``.

    Parameters
    ----------
    conv : nn.Module
        ``conv(graph, feat)`` or, with ``uses_edge_features``, ``conv(graph, feat, edge_feat)``.
    dim_out : int
        Output width of ``conv``.
    dropout : float
        Dropout after the normalisation.
    batchnorm : bool
        Apply ``BatchNorm1d``.
    residual : bool
        Add the destination nodes' input features (needs equal input and output widths).
    uses_edge_features : bool
        Pass the edge features to ``conv``.
    """

    def __init__(self, conv: nn.Module, dim_out: int, dropout: float = 0.0, batchnorm: bool = True,
                 residual: bool = True, uses_edge_features: bool = False):
        super().__init__()
        self.conv = conv
        self.norm = BatchNorm1d(dim_out) if batchnorm else nn.Identity()
        self.dropout, self.residual, self.uses_edge_features = dropout, residual, uses_edge_features

    def reset_parameters(self):
        reset_submodules(self)

    def forward(self, graph, feat: torch.Tensor, edge_feat: torch.Tensor | None = None):
        out = self.conv(graph, feat, edge_feat) if self.uses_edge_features else self.conv(graph, feat)
        residual = dst_features(graph, feat) if self.residual else None
        return batch_norm_act(self.norm, out, relu=True, post=residual, dropout=self.dropout), edge_feat
