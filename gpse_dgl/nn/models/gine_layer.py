"""GINE convolution (GIN with edge features, Hu et al. 2020) through :mod:`gpse_dgl.nn.ops`."""
from __future__ import annotations

import torch
from torch import nn

from .. import ops
from .gin_layer import GINConv
from .layer_utils import reset_module


class GINEConv(GINConv):
    r"""GIN convolution whose messages add the edge features (GraphGPS's local ``GINE`` model).

    .. math:: h_i' = f_\Theta\Big((1 + \epsilon)\, h_i + \sum_{j \to i} \mathrm{ReLU}(h_j + W_e e_{ji})\Big)

    :math:`W_e` is a ``Linear(edge_feats, in_feats)`` when ``edge_feats`` is given and differs from
    ``in_feats`` (PyG's ``edge_dim``), the identity otherwise. Same computation as
    ``dgl.nn.GINEConv`` / PyG's ``GINEConv``, aggregated through :mod:`gpse_dgl.nn.ops`.

    Parameters
    ----------
    apply_func : nn.Module, optional
        :math:`f_\Theta`; identity if ``None``.
    init_eps : float
        Initial :math:`\epsilon`.
    learn_eps : bool
        Make :math:`\epsilon` a trainable parameter.
    in_feats, edge_feats : int, optional
        Give both to project edge features of another width to ``in_feats``.
    backend : str, optional
        Message-passing backend (see :mod:`gpse_dgl.nn.ops`).

    Example
    -------
    >>> import dgl, torch
    >>> from torch import nn
    >>> from gpse_dgl.nn.models.gine_layer import GINEConv
    >>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
    >>> conv = GINEConv(nn.Linear(4, 8), in_feats=4, edge_feats=2)
    >>> conv(g, torch.randn(3, 4), torch.randn(3, 2)).shape
    torch.Size([3, 8])
    """

    def __init__(self, apply_func: nn.Module | None = None, init_eps: float = 0.0, learn_eps: bool = False,
                 in_feats: int | None = None, edge_feats: int | None = None, backend: str | None = None):
        super().__init__(apply_func, init_eps, learn_eps, backend)
        needs_projection = in_feats is not None and edge_feats is not None and in_feats != edge_feats
        self.edge_proj = nn.Linear(edge_feats, in_feats) if needs_projection else None

    def reset_parameters(self):
        self.eps.data.fill_(self.init_eps)
        if self.edge_proj is not None:
            self.edge_proj.reset_parameters()
        reset_module(self.apply_func)

    def forward(self, graph, feat: torch.Tensor, edge_feat: torch.Tensor) -> torch.Tensor:
        """``(graph, (N_src, d_in), (E, d_edge)) -> (N_dst, d_out)``."""
        if self.edge_proj is not None:
            edge_feat = self.edge_proj(edge_feat)
        return self.update(graph, feat, ops.relu_sum, feat, edge_feat)
