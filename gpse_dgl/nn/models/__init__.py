"""Downstream models (DGL ports of GraphGPS / GraphGym models) and their registry.

Registered names: ``gps``, ``transformer``, ``gin``, ``gine``, ``graphsage``, ``gcn``, ``gatv2``,
``gatedgcn``. Every model has the constructor of :class:`~gpse_dgl.nn.models.base.GraphModel`
(``dim_in, dim_out, *, dim_hidden, num_layers, dim_edge, dropout, pooling, task_level, pe_encoder,
node_encoder, edge_encoder, layers_pre_mp, layers_post_mp, head_halving, backend``) plus its own
options, and ``forward(graph, node_feat, edge_feat=None, pe=None)``.

Example
-------
>>> from gpse_dgl.nn.models import build_model
>>> from gpse_dgl.nn.pe_encoder import PEEncoder
>>> model = build_model("gps", dim_in=None, dim_out=1, node_encoder="atom", edge_encoder="bond",
...                     dim_hidden=64, num_layers=10, dropout=0.05, attn_dropout=0.5,
...                     pe_encoder=PEEncoder(512, 20, "linear", batchnorm=True, dropout_in=0.3, dropout_out=0.1))
"""
from .registry import MODEL_REGISTRY, build_model, register_model
from .base import ConvBlock, GraphModel
from .gatedgcn import GatedGCN
from .gatv2 import GATv2
from .gcn import GCN
from .gin import GIN
from .gine import GINE
from .gps import GPS
from .sage import GraphSAGE
from .transformer import Transformer

__all__ = ["MODEL_REGISTRY", "build_model", "register_model", "GraphModel", "ConvBlock", "GPS", "Transformer",
           "GIN", "GINE", "GraphSAGE", "GCN", "GATv2", "GatedGCN"]
