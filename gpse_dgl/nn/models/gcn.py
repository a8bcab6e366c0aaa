"""GCN downstream model (Kipf & Welling 2017)."""
from __future__ import annotations

from .base import ConvStack
from .gcn_layer import GCNConv
from .registry import register_model


@register_model("gcn")
class GCN(ConvStack):
    """Stack of :class:`GCNConv` blocks (``conv -> BN -> dropout -> ReLU`` + residual), GraphGym style.

    Parameters
    ----------
    dim_in, dim_out :
        See :class:`~gpse_dgl.nn.models.base.GraphModel` (and for every other keyword argument).
    batchnorm, residual : bool
        ``BatchNorm1d`` after each convolution; residual connection around each block.

    Accepts message-flow blocks (node-level tasks).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models import build_model
    >>> g = dgl.graph(([0, 1, 1, 2], [1, 0, 2, 1]))
    >>> build_model("gcn", dim_in=4, dim_out=2, task_level="node")(g, torch.randn(3, 4)).shape
    torch.Size([3, 2])
    """

    def __init__(self, dim_in, dim_out, **kwargs):
        super().__init__(dim_in, dim_out, conv=lambda d: GCNConv(d, d, backend=self.backend), **kwargs)
