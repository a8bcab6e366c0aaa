"""GraphSAGE convolution with the mean aggregator (Hamilton et al. 2017) through :mod:`gpse_dgl.nn.ops`."""
from __future__ import annotations

import torch
from torch import nn

from .. import ops
from .layer_utils import dst_features


class SAGEConv(nn.Module):
    r"""GraphSAGE layer, mean aggregator.

    .. math:: h_i' = W_{self} h_i + W_{neigh} \frac{1}{|N(i)|} \sum_{j \to i} h_j + b

    (nodes without in-edges get only the self term). Same computation as
    ``dgl.nn.SAGEConv(in, out, "mean")`` and PyG's ``SAGEConv``. Works on message-flow blocks from
    ``dgl.dataloading.MultiLayerNeighborSampler`` (``feat`` holds the block's source nodes).

    Parameters
    ----------
    in_feats, out_feats : int
        Input and output widths.
    bias : bool
        Learn the additive bias :math:`b`.
    backend : str, optional
        Message-passing backend (see :mod:`gpse_dgl.nn.ops`).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models.sage_layer import SAGEConv
    >>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
    >>> SAGEConv(4, 8)(g, torch.randn(3, 4)).shape
    torch.Size([3, 8])
    """

    def __init__(self, in_feats: int, out_feats: int, bias: bool = True, backend: str | None = None):
        super().__init__()
        self.in_feats, self.out_feats = in_feats, out_feats
        self.fc_self = nn.Linear(in_feats, out_feats, bias=bias)
        self.fc_neigh = nn.Linear(in_feats, out_feats, bias=False)
        self.backend = backend
        self.reset_parameters()

    def reset_parameters(self):
        gain = nn.init.calculate_gain("relu")  # DGL's initialisation
        nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)
        if self.fc_self.bias is not None:
            nn.init.zeros_(self.fc_self.bias)

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        """``(graph or block, (N_src, in_feats)) -> (N_dst, out_feats)``."""
        # The mean and the linear map commute: shrink the features first when that moves less data.
        if self.in_feats > self.out_feats:
            neighbours = ops.copy_u_mean(graph, self.fc_neigh(feat), backend=self.backend)
        else:
            neighbours = self.fc_neigh(ops.copy_u_mean(graph, feat, backend=self.backend))
        return self.fc_self(dst_features(graph, feat)) + neighbours
