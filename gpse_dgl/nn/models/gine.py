"""GINE downstream model (GIN with edge features; MoleculeNet in the GPSE paper: 5 layers x 300)."""
from __future__ import annotations

from .base import ConvStack
from .gin import gin_mlp
from .gine_layer import GINEConv
from .registry import register_model


@register_model("gine")
class GINE(ConvStack):
    """Stack of :class:`GINEConv` blocks (``conv -> BN -> dropout -> ReLU`` + residual), GraphGym style.

    Edge features are encoded once to ``dim_hidden`` (``edge_encoder``, e.g. ``"bond"``) and shared by
    all layers. Use ``mlp_ratio=2`` for the "gine2conv" variant of the paper's MoleculeNet runs.

    Parameters
    ----------
    dim_in, dim_out :
        See :class:`~gpse_dgl.nn.models.base.GraphModel` (and for every other keyword argument).
    mlp_ratio : int
        Hidden width of each GIN MLP, in multiples of ``dim_hidden``.
    learn_eps : bool
        Trainable :math:`\\epsilon`.
    batchnorm, residual : bool
        ``BatchNorm1d`` after each convolution; residual connection around each block.

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models import build_model
    >>> g = dgl.graph(([0, 1, 1, 2], [1, 0, 2, 1]))
    >>> model = build_model("gine", dim_in=None, node_encoder="atom", edge_encoder="bond", dim_out=1,
    ...                     dim_hidden=16)
    >>> model(g, torch.zeros(3, 9, dtype=torch.long), torch.zeros(4, 3, dtype=torch.long)).shape
    torch.Size([1, 1])
    """

    supports_blocks = False

    def __init__(self, dim_in, dim_out, *, mlp_ratio: int = 1, learn_eps: bool = False, **kwargs):
        super().__init__(dim_in, dim_out, uses_edge_features=True, **kwargs,
                         conv=lambda d: GINEConv(gin_mlp(d, mlp_ratio), learn_eps=learn_eps, backend=self.backend))
