"""GATv2 convolution (Brody et al. 2022) through :mod:`gpse_dgl.nn.ops`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..dropout import Dropout
from .layer_utils import dst_features, with_self_loops


class GATv2Conv(nn.Module):
    r"""Multi-head GATv2 attention.

    For head :math:`k` and edge :math:`j \to i`:

    .. math::
        s_{ij}^k &= a_k^\top \mathrm{LeakyReLU}\big(W_{src}^k h_j + W_{dst}^k h_i\big) \\
        \alpha_{ij}^k &= \mathrm{softmax}_{j \to i}(s_{ij}^k) \\
        h_i'^k &= \sum_{j \to i} \alpha_{ij}^k W_{src}^k h_j \;+\; W_{res}^k h_i

    Heads are concatenated (``concat_heads=True``, width ``num_heads * out_feats``) or averaged
    (width ``out_feats``). With ``add_self_loops=False, concat_heads=True`` this is
    ``dgl.nn.GATv2Conv`` with its output flattened; the default adds one self-loop per node first,
    as PyG's ``GATv2Conv`` (used by GPSE) does, so isolated nodes still attend to themselves.

    Parameters
    ----------
    in_feats, out_feats : int
        Input width and per-head output width.
    num_heads : int
        Number of attention heads.
    negative_slope : float
        LeakyReLU slope.
    attn_drop : float
        Dropout on the attention coefficients.
    residual : bool
        Add :math:`W_{res} h_i` (identity when ``in_feats == num_heads * out_feats``).
    add_self_loops : bool
        Attend over :math:`N(i) \cup \{i\}`.
    concat_heads : bool
        Concatenate (``True``) or average (``False``) the heads.
    bias : bool
        Biases of the linear maps (as in DGL).
    share_weights : bool
        Use one matrix for :math:`W_{src}` and :math:`W_{dst}`.
    backend : str, optional
        Message-passing backend (see :mod:`gpse_dgl.nn.ops`).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models.gatv2_layer import GATv2Conv
    >>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
    >>> GATv2Conv(4, 8, num_heads=2, concat_heads=True)(g, torch.randn(3, 4)).shape
    torch.Size([3, 16])
    """

    def __init__(self, in_feats: int, out_feats: int, num_heads: int = 1, negative_slope: float = 0.2,
                 attn_drop: float = 0.0, residual: bool = False, add_self_loops: bool = True,
                 concat_heads: bool = False, bias: bool = True, share_weights: bool = False,
                 backend: str | None = None):
        super().__init__()
        self.num_heads, self.out_feats = num_heads, out_feats
        self.fc_src = nn.Linear(in_feats, num_heads * out_feats, bias=bias)
        self.fc_dst = self.fc_src if share_weights else nn.Linear(in_feats, num_heads * out_feats, bias=bias)
        self.attn = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.attn_drop = Dropout(attn_drop)
        self.negative_slope = negative_slope
        if residual and in_feats != num_heads * out_feats:
            self.res_fc = nn.Linear(in_feats, num_heads * out_feats, bias=bias)
        else:
            self.res_fc = nn.Identity() if residual else None
        self.add_self_loops = add_self_loops
        self.concat_heads = concat_heads
        self.backend = backend
        self.reset_parameters()

    def reset_parameters(self):
        gain = nn.init.calculate_gain("relu")  # DGL's initialisation
        for linear in (self.fc_src, self.fc_dst, self.res_fc):
            if isinstance(linear, nn.Linear):
                nn.init.xavier_normal_(linear.weight, gain=gain)
                if linear.bias is not None:
                    nn.init.zeros_(linear.bias)
        nn.init.xavier_normal_(self.attn, gain=gain)

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        """``(graph or block, (N_src, in_feats)) -> (N_dst, num_heads * out_feats or out_feats)``."""
        feat_dst = dst_features(graph, feat)
        if self.add_self_loops:
            graph = with_self_loops(graph)
        heads = (self.num_heads, self.out_feats)
        src = self.fc_src(feat).view(-1, *heads)
        dst = self.fc_dst(feat_dst).view(-1, *heads)
        scores = F.leaky_relu(ops.u_add_v(graph, src, dst, backend=self.backend), self.negative_slope)
        scores = (scores * self.attn).sum(dim=-1, keepdim=True)  # (E, heads, 1)
        alpha = self.attn_drop(ops.edge_softmax(graph, scores, backend=self.backend))
        out = ops.u_mul_e_sum(graph, src, alpha, backend=self.backend)  # (N_dst, heads, out_feats)
        if self.res_fc is not None:
            out = out + self.res_fc(feat_dst).view(-1, *heads)
        return out.flatten(1) if self.concat_heads else out.mean(dim=1)
