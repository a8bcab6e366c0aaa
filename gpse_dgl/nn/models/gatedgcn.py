"""GatedGCN downstream model (Bresson & Laurent 2017, with edge features; ZINC baselines)."""
from __future__ import annotations

from torch import nn

from .base import GraphModel
from .gatedgcn_layer import GatedGCNLayer
from .registry import register_model


@register_model("gatedgcn")
class GatedGCN(GraphModel):
    """Stack of :class:`GatedGCNLayer` (each with its own BN, ReLU, dropout and node/edge residuals).

    Parameters
    ----------
    dim_in, dim_out :
        See :class:`~gpse_dgl.nn.models.base.GraphModel` (and for every other keyword argument).
    batchnorm, residual : bool
        Passed to every :class:`GatedGCNLayer`.

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models import build_model
    >>> g = dgl.graph(([0, 1, 1, 2], [1, 0, 2, 1]))
    >>> build_model("gatedgcn", dim_in=4, dim_out=1, dim_hidden=16)(g, torch.randn(3, 4)).shape
    torch.Size([1, 1])
    """

    supports_blocks = False

    def __init__(self, dim_in, dim_out, *, batchnorm: bool = True, residual: bool = True, **kwargs):
        super().__init__(dim_in, dim_out, uses_edge_features=True, **kwargs)
        d = self.dim_hidden
        self.layers = nn.ModuleList(
            GatedGCNLayer(d, d, dropout=self.dropout, residual=residual, batchnorm=batchnorm, backend=self.backend)
            for _ in range(self.num_layers))
