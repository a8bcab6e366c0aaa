"""GPS layer: local message passing + global self-attention + feed-forward (Rampasek et al. 2022)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..batch_norm import BatchNorm1d, batch_norm_act
from ..dropout import dropout
from .gatedgcn_layer import GatedGCNLayer
from .gine_layer import GINEConv
from .global_attention import GlobalSelfAttention
from .layer_utils import reset_submodules

LOCAL_MPNNS = ("gatedgcn", "gine", None)
GLOBAL_ATTENTIONS = ("transformer", None)


class GPSLayer(nn.Module):
    r"""One layer of the GPS graph transformer (GraphGPS's ``GPSLayer``, batch-norm variant).

    .. math::
        h_{local} &= \mathrm{BN}\big(h + \mathrm{Dropout}(\mathrm{MPNN}(h, e))\big) \\
        h_{attn}  &= \mathrm{BN}\big(h + \mathrm{Dropout}(\mathrm{MHA}(h))\big) \\
        h'        &= \mathrm{BN}\big(\tilde h + \mathrm{FFN}(\tilde h)\big),\qquad \tilde h = h_{local} + h_{attn}

    with :math:`\mathrm{FFN}(x) = \mathrm{Dropout}(W_2\, \mathrm{Dropout}(\mathrm{ReLU}(W_1 x)))`,
    :math:`W_1: d \to 2d`. The GatedGCN local model applies its own residual, BN, ReLU and dropout
    (and also returns updated edge features) before the shared BN, as in GraphGPS.
    Either branch may be switched off (``None``); at least one must stay.

    Parameters
    ----------
    dim_hidden : int
        Node (and edge) feature width.
    local_mpnn : {"gatedgcn", "gine", None}
        Local message-passing model; both use edge features of width ``dim_hidden``.
    global_attention : {"transformer", None}
        Global model: full multi-head self-attention within each graph.
    num_heads : int
        Attention heads.
    dropout : float
        Dropout of the local / attention outputs and of the FFN.
    attn_dropout : float
        Dropout on the attention weights.
    batchnorm : bool
        ``BatchNorm1d`` after each residual sum (GraphGPS default); identity otherwise.
    backend : str, optional
        Message-passing backend (see :mod:`gpse_dgl.nn.ops`).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models.gps_layer import GPSLayer
    >>> g = dgl.batch([dgl.graph(([0, 1], [1, 0])), dgl.graph(([0, 1, 2], [1, 2, 0]))])
    >>> layer = GPSLayer(16, local_mpnn="gatedgcn", global_attention="transformer", num_heads=4)
    >>> h, e = layer(g, torch.randn(5, 16), torch.randn(5, 16))
    >>> h.shape, e.shape
    (torch.Size([5, 16]), torch.Size([5, 16]))
    """

    def __init__(self, dim_hidden: int, local_mpnn: str | None = "gatedgcn",
                 global_attention: str | None = "transformer", num_heads: int = 4, dropout: float = 0.0,
                 attn_dropout: float = 0.0, batchnorm: bool = True, backend: str | None = None):
        super().__init__()
        local_mpnn, global_attention = normalise_choice(local_mpnn), normalise_choice(global_attention)
        if local_mpnn not in LOCAL_MPNNS:
            raise ValueError(f"unknown GPS local MPNN {local_mpnn!r}; choose one of {LOCAL_MPNNS}")
        if global_attention not in GLOBAL_ATTENTIONS:
            raise ValueError(f"unknown GPS global attention {global_attention!r}; choose one of {GLOBAL_ATTENTIONS}")
        if local_mpnn is None and global_attention is None:
            raise ValueError("a GPS layer needs a local MPNN, a global attention, or both")
        self.local_mpnn_type, self.global_attention_type = local_mpnn, global_attention
        self.dropout = dropout

        def norm():
            return BatchNorm1d(dim_hidden) if batchnorm else nn.Identity()

        self.local_model = None
        if local_mpnn == "gatedgcn":
            self.local_model = GatedGCNLayer(dim_hidden, dim_hidden, dropout=dropout, residual=True,
                                             backend=backend)
        elif local_mpnn == "gine":
            gin_mlp = nn.Sequential(nn.Linear(dim_hidden, dim_hidden), nn.ReLU(), nn.Linear(dim_hidden, dim_hidden))
            self.local_model = GINEConv(gin_mlp, backend=backend)
        self.norm_local = norm() if self.local_model is not None else None

        self.self_attn = None
        if global_attention == "transformer":
            self.self_attn = GlobalSelfAttention(dim_hidden, num_heads, dropout=attn_dropout)
        self.norm_attn = norm() if self.self_attn is not None else None

        self.ff_linear1 = nn.Linear(dim_hidden, 2 * dim_hidden)
        self.ff_linear2 = nn.Linear(2 * dim_hidden, dim_hidden)
        self.norm_ff = norm()

    def reset_parameters(self):
        reset_submodules(self)

    def forward(self, graph, feat: torch.Tensor, edge_feat: torch.Tensor | None = None):
        """``(batched graph, (N, d), (E, d) or None) -> ((N, d), edge features)``.

        Edge features are returned updated by the GatedGCN local model, unchanged otherwise.
        """
        branches = []
        if self.local_model is not None:
            if edge_feat is None:
                raise ValueError(f"GPS local model {self.local_mpnn_type!r} needs edge features")
            if self.local_mpnn_type == "gatedgcn":
                h_local, edge_feat = self.local_model(graph, feat, edge_feat)  # residual inside
                branches.append(batch_norm_act(self.norm_local, h_local))
            else:
                h_local = dropout(self.local_model(graph, feat, edge_feat), self.dropout, self.training)
                branches.append(batch_norm_act(self.norm_local, h_local, pre=feat))
        if self.self_attn is not None:
            h_attn = dropout(self.self_attn(graph, feat), self.dropout, self.training)
            branches.append(batch_norm_act(self.norm_attn, h_attn, pre=feat))
        h = branches[0] if len(branches) == 1 else branches[0] + branches[1]
        return batch_norm_act(self.norm_ff, self._feed_forward(h), pre=h), edge_feat

    def _feed_forward(self, h: torch.Tensor) -> torch.Tensor:
        h = dropout(F.relu(self.ff_linear1(h)), self.dropout, self.training)
        return dropout(self.ff_linear2(h), self.dropout, self.training)


def normalise_choice(value):
    """Lower-case a choice and read ``"None"`` (as written in YAML recipes / GraphGPS configs) as ``None``."""
    if isinstance(value, str):
        value = value.lower()
        return None if value == "none" else value
    return value
