"""GIN downstream model (Xu et al. 2019; CSL / EXP in the GPSE paper: 5 layers x 128)."""
from __future__ import annotations

from torch import nn

from .base import ConvStack
from .gin_layer import GINConv
from .registry import register_model


def gin_mlp(dim: int, mlp_ratio: int = 1) -> nn.Sequential:
    """GIN's update network ``Linear(d, r d) -> ReLU -> Linear(r d, d)`` (``r = 2``: Hu et al.'s GINE)."""
    return nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.ReLU(), nn.Linear(mlp_ratio * dim, dim))


@register_model("gin")
class GIN(ConvStack):
    """Stack of :class:`GINConv` blocks (``conv -> BN -> dropout -> ReLU`` + residual), GraphGym style.

    Parameters
    ----------
    dim_in, dim_out :
        See :class:`~gpse_dgl.nn.models.base.GraphModel` (also for every other keyword argument:
        ``dim_hidden``, ``num_layers``, ``dropout``, ``pooling``, ``task_level``, ``pe_encoder``, ...).
    mlp_ratio : int
        Hidden width of each GIN MLP, in multiples of ``dim_hidden``.
    learn_eps : bool
        Trainable :math:`\\epsilon`.
    batchnorm, residual : bool
        ``BatchNorm1d`` after each convolution; residual connection around each block.

    Accepts message-flow blocks (node-level tasks).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models import build_model
    >>> g = dgl.batch([dgl.graph(([0, 1], [1, 0])), dgl.graph(([0, 1, 2], [1, 2, 0]))])
    >>> model = build_model("gin", dim_in=3, dim_out=2, dim_hidden=16, num_layers=2)
    >>> model(g, torch.randn(5, 3)).shape
    torch.Size([2, 2])
    """

    def __init__(self, dim_in, dim_out, *, mlp_ratio: int = 1, learn_eps: bool = False, **kwargs):
        super().__init__(dim_in, dim_out, **kwargs,
                         conv=lambda d: GINConv(gin_mlp(d, mlp_ratio), learn_eps=learn_eps, backend=self.backend))
