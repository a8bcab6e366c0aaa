"""GPS graph transformer (Rampasek et al. 2022), the main downstream model of the GPSE paper."""
from __future__ import annotations

from torch import nn

from .base import GraphModel
from .gps_layer import GPSLayer, normalise_choice
from .registry import register_model


@register_model("gps")
class GPS(GraphModel):
    """Stack of :class:`GPSLayer` (local MPNN + global attention + FFN) between encoders and a head.

    Paper settings (``hp_mol_bench``): ZINC ``local_mpnn="gine", global_attention=None``, 10 x 64;
    MolHIV ``"gatedgcn" + "transformer"``, 10 x 64, 4 heads, dropout 0.05, attention dropout 0.5;
    mean pooling. The head defaults to GraphGPS's ``san_graph`` head (3 linear layers, halving widths).

    Parameters
    ----------
    dim_in, dim_out :
        See :class:`~gpse_dgl.nn.models.base.GraphModel` (and for every other keyword argument).
    local_mpnn : {"gatedgcn", "gine", None}
        Local message passing of every layer (uses edge features; ``None`` disables it).
    global_attention : {"transformer", None}
        Global self-attention of every layer.
    num_heads : int
        Attention heads.
    attn_dropout : float
        Dropout on the attention weights.
    batchnorm : bool
        ``BatchNorm1d`` after each residual sum.

    Whole graphs only (no message-flow blocks).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models import build_model
    >>> g = dgl.batch([dgl.graph(([0, 1], [1, 0])), dgl.graph(([0, 1, 2], [1, 2, 0]))])
    >>> model = build_model("gps", dim_in=3, dim_out=1, dim_hidden=16, num_layers=2, num_heads=4)
    >>> model(g, torch.randn(5, 3)).shape
    torch.Size([2, 1])
    """

    supports_blocks = False

    def __init__(self, dim_in, dim_out, *, local_mpnn: str | None = "gatedgcn",
                 global_attention: str | None = "transformer", num_heads: int = 4, attn_dropout: float = 0.0,
                 batchnorm: bool = True, layers_post_mp: int = 3, head_halving: bool = True, **kwargs):
        super().__init__(dim_in, dim_out, layers_post_mp=layers_post_mp, head_halving=head_halving,
                         uses_edge_features=normalise_choice(local_mpnn) is not None, **kwargs)
        self.layers = nn.ModuleList(
            GPSLayer(self.dim_hidden, local_mpnn, global_attention, num_heads=num_heads, dropout=self.dropout,
                     attn_dropout=attn_dropout, batchnorm=batchnorm, backend=self.backend)
            for _ in range(self.num_layers))
