"""GatedGCN layer with edge features (Bresson & Laurent 2017, as in GraphGPS's ``GatedGCNLayer``)."""
from __future__ import annotations

import torch
from torch import nn

from .. import ops
from ..batch_norm import BatchNorm1d, batch_norm_act
from .layer_utils import dst_features, reset_submodules


class GatedGCNLayer(nn.Module):
    r"""Residual gated graph convolution that updates both node and edge features.

    For an edge :math:`j \to i`:

    .. math::
        \hat e_{ij} &= C e_{ij} + D h_i + E h_j \\
        \eta_{ij} &= \frac{\sigma(\hat e_{ij})}{\sum_{k \to i} \sigma(\hat e_{ik}) + \epsilon} \\
        h_i' &= h_i + \mathrm{Dropout}\big(\mathrm{ReLU}(\mathrm{BN}(A h_i + \textstyle\sum_{j \to i}
                \eta_{ij} \odot B h_j))\big) \\
        e_{ij}' &= e_{ij} + \mathrm{Dropout}\big(\mathrm{ReLU}(\mathrm{BN}(\hat e_{ij}))\big)

    with :math:`\epsilon = 10^{-6}`; the residual terms are present when ``residual=True``.
    Unlike ``gpse_dgl.nn.gated_conv.ResGatedConv`` (GPSE's encoder layer), edges carry features here.

    Parameters
    ----------
    in_feats : int
        Width of node and edge input features (both are ``in_feats`` wide).
    out_feats : int
        Width of node and edge output features; must equal ``in_feats`` when ``residual=True``.
    dropout : float
        Dropout on the updated node and edge features.
    residual : bool
        Add the input node / edge features to the outputs.
    batchnorm : bool
        ``BatchNorm1d`` on the updated node and edge features.
    backend : str, optional
        Message-passing backend (see :mod:`gpse_dgl.nn.ops`).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models.gatedgcn_layer import GatedGCNLayer
    >>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
    >>> layer = GatedGCNLayer(8, 8, dropout=0.1)
    >>> h, e = layer(g, torch.randn(3, 8), torch.randn(3, 8))
    >>> h.shape, e.shape
    (torch.Size([3, 8]), torch.Size([3, 8]))
    """

    # enough under bf16/fp16 autocast too: numerator and denominator are float32 sums (gpse_dgl.nn.ops)
    eps = 1e-6

    def __init__(self, in_feats: int, out_feats: int, dropout: float = 0.0, residual: bool = True,
                 batchnorm: bool = True, backend: str | None = None):
        super().__init__()
        if residual and in_feats != out_feats:
            raise ValueError(f"residual GatedGCNLayer needs in_feats == out_feats, got {in_feats} != {out_feats}")
        self.A = nn.Linear(in_feats, out_feats)
        self.B = nn.Linear(in_feats, out_feats)
        self.C = nn.Linear(in_feats, out_feats)
        self.D = nn.Linear(in_feats, out_feats)
        self.E = nn.Linear(in_feats, out_feats)
        self.bn_node = BatchNorm1d(out_feats) if batchnorm else nn.Identity()
        self.bn_edge = BatchNorm1d(out_feats) if batchnorm else nn.Identity()
        self.dropout = dropout
        self.residual = residual
        self.backend = backend

    def reset_parameters(self):
        reset_submodules(self)

    def forward(self, graph, feat: torch.Tensor, edge_feat: torch.Tensor):
        """``(graph, (N_src, in) node features, (E, in) edge features) -> ((N_dst, out), (E, out))``."""
        feat_dst = dst_features(graph, feat)
        aggregated, gate_logits = ops.edge_gated_sum(graph, self.B(feat), self.D(feat_dst), self.E(feat),
                                                     self.C(edge_feat), self.eps, backend=self.backend)
        h = self.A(feat_dst) + aggregated

        h = batch_norm_act(self.bn_node, h, relu=True, post=feat_dst if self.residual else None, dropout=self.dropout)
        e = batch_norm_act(self.bn_edge, gate_logits, relu=True, post=edge_feat if self.residual else None,
                           dropout=self.dropout)
        return h, e
