"""GraphSAGE downstream model (mean aggregator; ogbn-arxiv in the GPSE paper: 3 layers x 256)."""
from __future__ import annotations

from .base import ConvStack
from .registry import register_model
from .sage_layer import SAGEConv


@register_model("graphsage")
class GraphSAGE(ConvStack):
    """Stack of mean-aggregator :class:`SAGEConv` blocks (``conv -> BN -> dropout -> ReLU`` + residual).

    Runs full-graph or on the message-flow blocks of ``dgl.dataloading.MultiLayerNeighborSampler``
    (pass the list of ``num_layers`` blocks as ``graph`` and the first block's source-node features).

    Parameters
    ----------
    dim_in, dim_out :
        See :class:`~gpse_dgl.nn.models.base.GraphModel` (and for every other keyword argument).
    batchnorm, residual : bool
        ``BatchNorm1d`` after each convolution; residual connection around each block.

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models import build_model
    >>> g = dgl.graph(([0, 1, 2, 3], [1, 2, 3, 0]))
    >>> model = build_model("graphsage", dim_in=5, dim_out=3, task_level="node", num_layers=2)
    >>> sampler = dgl.dataloading.MultiLayerNeighborSampler([2, 2])
    >>> _, _, blocks = sampler.sample_blocks(g, torch.tensor([0, 1]))
    >>> model(blocks, torch.randn(blocks[0].num_src_nodes(), 5)).shape
    torch.Size([2, 3])
    """

    def __init__(self, dim_in, dim_out, **kwargs):
        super().__init__(dim_in, dim_out, conv=lambda d: SAGEConv(d, d, backend=self.backend), **kwargs)
