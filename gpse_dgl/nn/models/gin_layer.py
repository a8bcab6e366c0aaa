"""GIN convolution (Xu et al. 2019) through :mod:`gpse_dgl.nn.ops`."""
from __future__ import annotations

import torch
from torch import nn

from .. import ops
from .layer_utils import dst_features, reset_module


class GINConv(nn.Module):
    r"""Graph Isomorphism Network convolution with sum aggregation.

    .. math:: h_i' = f_\Theta\Big((1 + \epsilon)\, h_i + \sum_{j \to i} h_j\Big)

    Same computation as ``dgl.nn.GINConv(apply_func, "sum")`` and PyG's ``GINConv``, but every
    aggregation goes through :mod:`gpse_dgl.nn.ops`, so it also runs on CUDA with a CPU-only DGL.

    Parameters
    ----------
    apply_func : nn.Module, optional
        :math:`f_\Theta` (GraphGPS / GraphGym use ``Linear -> ReLU -> Linear``); identity if ``None``.
    init_eps : float
        Initial :math:`\epsilon`.
    learn_eps : bool
        Make :math:`\epsilon` a trainable parameter.
    backend : str, optional
        Message-passing backend (see :mod:`gpse_dgl.nn.ops`).

    Works on graphs and on message-flow blocks (``feat`` holds the source nodes).

    Example
    -------
    >>> import dgl, torch
    >>> from torch import nn
    >>> from gpse_dgl.nn.models.gin_layer import GINConv
    >>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
    >>> conv = GINConv(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8)))
    >>> conv(g, torch.randn(3, 4)).shape
    torch.Size([3, 8])
    """

    def __init__(self, apply_func: nn.Module | None = None, init_eps: float = 0.0, learn_eps: bool = False,
                 backend: str | None = None):
        super().__init__()
        self.apply_func = apply_func
        self.init_eps = init_eps
        if learn_eps:
            self.eps = nn.Parameter(torch.tensor([float(init_eps)]))
        else:
            self.register_buffer("eps", torch.tensor([float(init_eps)]))
        self.backend = backend

    def reset_parameters(self):
        self.eps.data.fill_(self.init_eps)
        reset_module(self.apply_func)

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        """``(graph, (N_src, d_in)) -> (N_dst, d_out)``."""
        return self.update(graph, feat, ops.copy_u_sum, feat)

    def update(self, graph, feat: torch.Tensor, aggregate, *operands) -> torch.Tensor:
        r""":math:`f_\Theta((1 + \epsilon) h_i + a_i)` with :math:`a` = ``aggregate(graph, *operands)``, an op of
        :mod:`gpse_dgl.nn.ops` that takes the self term as ``self_weight`` (its kernel then starts each sum there:
        one op instead of four, forward and backward) where :math:`\epsilon` can be read without a GPU sync."""
        if self.eps.requires_grad or feat.device.type != "cpu":  # float(eps) would sync a GPU once per layer
            summed = aggregate(graph, *operands, backend=self.backend)  # float32 under bf16 autocast
            h = (1 + self.eps) * dst_features(graph, feat) + summed
        else:
            h = aggregate(graph, *operands, backend=self.backend, self_weight=1 + float(self.eps))
        return self.apply_func(h) if self.apply_func is not None else h
