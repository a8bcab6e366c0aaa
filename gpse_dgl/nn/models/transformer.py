"""Graph Transformer: GPS with global attention only (no local message passing)."""
from __future__ import annotations

from .gps import GPS
from .registry import register_model


@register_model("transformer")
class Transformer(GPS):
    """:class:`GPS` with ``local_mpnn=None, global_attention="transformer"``: each layer is
    ``BN(h + MHA(h))`` followed by ``BN(h + FFN(h))``. Position/structure information comes only
    from the ``pe_encoder`` input. Same keyword arguments as :class:`GPS` except the two fixed ones.

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models import build_model
    >>> g = dgl.batch([dgl.graph(([0, 1], [1, 0])), dgl.graph(([0, 1, 2], [1, 2, 0]))])
    >>> build_model("transformer", dim_in=3, dim_out=1, dim_hidden=16, num_layers=2)(g, torch.randn(5, 3)).shape
    torch.Size([2, 1])
    """

    fixed_options = {"local_mpnn": None, "global_attention": "transformer"}

    def __init__(self, dim_in, dim_out, **kwargs):
        for fixed in self.fixed_options:
            if fixed in kwargs:
                raise TypeError(f"Transformer fixes {fixed}; use GPS to choose it")
        super().__init__(dim_in, dim_out, **self.fixed_options, **kwargs)
