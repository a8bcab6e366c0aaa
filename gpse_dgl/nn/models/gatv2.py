"""GATv2 downstream model (Brody et al. 2022; ogbn-proteins in the GPSE paper: 3 layers x 256)."""
from __future__ import annotations

from .base import ConvStack
from .gatv2_layer import GATv2Conv
from .registry import register_model


@register_model("gatv2")
class GATv2(ConvStack):
    """Stack of :class:`GATv2Conv` blocks (``conv -> BN -> dropout -> ReLU`` + residual), GraphGym style.

    Parameters
    ----------
    dim_in, dim_out :
        See :class:`~gpse_dgl.nn.models.base.GraphModel` (and for every other keyword argument).
    num_heads : int
        Attention heads per layer.
    attn_dropout : float
        Dropout on the attention coefficients.
    concat_heads : bool
        Concatenate heads of width ``dim_hidden // num_heads`` (``True``) or average heads of width
        ``dim_hidden`` (``False``, GPSE's ``att_concat_proj: false``).
    add_self_loops : bool
        Every node also attends to itself (PyG's default, used by GPSE).
    batchnorm, residual : bool
        ``BatchNorm1d`` after each convolution; residual connection around each block.

    Accepts message-flow blocks (node-level tasks, e.g. ogbn-proteins with neighbour sampling).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models import build_model
    >>> g = dgl.graph(([0, 1, 1, 2], [1, 0, 2, 1]))
    >>> build_model("gatv2", dim_in=4, dim_out=2, num_heads=2, task_level="node")(g, torch.randn(3, 4)).shape
    torch.Size([3, 2])
    """

    def __init__(self, dim_in, dim_out, *, num_heads: int = 1, attn_dropout: float = 0.0,
                 concat_heads: bool = False, add_self_loops: bool = True, **kwargs):
        def conv(d: int) -> GATv2Conv:
            if concat_heads and d % num_heads:
                raise ValueError(f"dim_hidden ({d}) must be divisible by num_heads ({num_heads}) to concatenate heads")
            return GATv2Conv(d, d // num_heads if concat_heads else d, num_heads=num_heads, attn_drop=attn_dropout,
                             add_self_loops=add_self_loops, concat_heads=concat_heads, backend=self.backend)

        super().__init__(dim_in, dim_out, conv=conv, **kwargs)
