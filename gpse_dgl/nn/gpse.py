"""GPSE: the Graph Positional and Structural Encoder (Cantürk et al., ICML 2024) on DGL.

Two modules:

* :class:`GPSE`, the encoder: random node features -> 512-d unit-norm encodings.
* :class:`GPSEForPretraining`, the encoder and the pretraining heads
  (:class:`~gpse_dgl.nn.heads.GPSEHeads`: one small MLP per node-level target column and one MLP on the
  pooled graph representation for the graph-level targets).

The computation is the one of PyG's ``torch_geometric.nn.GPSE`` (GraphGym layout, default arguments),
which is what the authors' published checkpoints contain; :mod:`gpse_dgl.nn.pyg_compat` converts
those checkpoints. Every module has ``to_config()`` / ``from_config(config)`` with plain dicts, so a
checkpoint can store ``{"config": model.to_config(), "state_dict": model.state_dict()}`` and rebuild:

>>> from gpse_dgl.nn.gpse import GPSEForPretraining
>>> model = GPSEForPretraining.from_config({"encoder": {"dim_hidden": 16, "num_layers": 2}})
>>> clone = GPSEForPretraining.from_config(model.to_config())
>>> clone.load_state_dict(model.state_dict())
<All keys matched successfully>
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
import torch.nn.functional as F

from .. import _env  # noqa: F401
import dgl

from .. import kernels
from ..utils.precision import to_accumulation
from .batch_norm import BatchNorm1d
from .dropout import Dropout
from .gated_conv import ResGatedConv, product_dtype
from .heads import GPSE_POOLINGS, GPSEHeads
from .random_features import random_node_features
from .residual import EPS, normalized_residual, normalized_residual_
from .virtual_node import VirtualNodeInfo, add_virtual_nodes, no_virtual_nodes, pool

__all__ = ["GPSE", "GPSEForPretraining"]


def _wants_grad(module: nn.Module, *tensors) -> bool:
    """Whether autograd must record: grad mode on, and a tensor or a parameter of ``module`` requires grad
    (the parameters are only looked at in grad mode: encoding calls this once per layer)."""
    return torch.is_grad_enabled() and (any(t.requires_grad for t in tensors)
                                        or any(p.requires_grad for p in module.parameters()))


def _batch_norm_(y: torch.Tensor, norm: nn.BatchNorm1d) -> torch.Tensor:
    """``norm(y)``, in place on ``y`` in eval mode (no autograd).

    ``y * alpha + beta`` with ``alpha = weight / sqrt(var + eps)``, ``beta = bias - mean * alpha``
    (the arithmetic of ATen's CPU inference kernel, bit-identical there, and far faster than it on
    ``(N, C)`` inputs).
    """
    if norm.training or not norm.track_running_stats or norm.running_var is None:
        return norm(y)
    alpha = torch.rsqrt(norm.running_var + norm.eps)
    if norm.weight is not None:
        alpha = alpha * norm.weight
    beta = -norm.running_mean * alpha if norm.bias is None else torch.addcmul(norm.bias, norm.running_mean, alpha,
                                                                                value=-1)
    return torch.addcmul(beta, y, alpha, out=y)


class GPSE(nn.Module):
    r"""The GPSE encoder: a deep residual gated GCN over the graph plus one virtual node per graph.

    With :math:`x` the ``(N, dim_in)`` random node features (zeros for virtual nodes):

    .. math::
        h^{(0)} &= \mathrm{normalize}\big(\mathrm{ReLU}(\mathrm{Dropout}(\mathrm{BN}(W_0 x)))\big) \\
        h^{(l+1)} &= h^{(l)} + \mathrm{normalize}\big(\mathrm{ReLU}(\mathrm{Dropout}(\mathrm{BN}_l(
            \mathrm{ResGatedConv}_l(h^{(l)}))))\big), \quad l = 0 .. L-1 \\
        \mathrm{GPSE}(x) &= \mathrm{normalize}(h^{(L)})

    where ``normalize`` scales every row to unit L2 norm (``F.normalize``, eps
    :data:`~gpse_dgl.nn.residual.EPS`), :math:`W_0` has no bias, and the convolutions
    (:class:`~gpse_dgl.nn.gated_conv.ResGatedConv`) have no output bias.
    This is exactly the order of PyG's ``GPSE`` (``GeneralLayer``: layer -> BatchNorm -> Dropout ->
    activation -> L2 norm; ``GNNStackStage`` with ``skipsum`` and a final L2 norm).

    Under ``torch.autocast`` (bf16/fp16) only :math:`W_0 x` and the convolutions' products run in the
    low precision: the BatchNorms, the L2 norms and the residual stream :math:`h` are float32, and so
    is the output.

    Parameters
    ----------
    dim_in : int
        Random input features per node. Default 20.
    dim_hidden : int
        Width of every layer and of the encoding. Default 512.
    num_layers : int
        Message-passing layers. Default 20.
    dropout : float
        Dropout after every BatchNorm. Default 0.2.
    virtual_node : bool
        Add one virtual node per graph (joined both ways to every node, zero input). Default True.
    learn_input_norm : bool
        Train the affine scale and shift of the input BatchNorm (default, as in the paper). ``False``
        keeps them at 1 and 0: a small model trained with them learns to shrink the scale until the
        random features barely reach the layers (the input is then the same for every node, and the
        model no more expressive than 1-WL message passing). The parameters stay in the state dict
        either way, so checkpoints and the authors' format are unchanged.
    backend : str, optional
        Message-passing backend for every layer (``"dgl"``, ``"torch"``, ``"auto"``/``None``).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.gpse import GPSE
    >>> enc = GPSE(dim_hidden=32, num_layers=3).eval()
    >>> g = dgl.batch([dgl.graph(([0, 1, 1, 2], [1, 0, 2, 1])), dgl.graph(([0, 1], [1, 0]))])
    >>> enc(g, seed=0).shape
    torch.Size([5, 32])
    """

    def __init__(self, dim_in: int = 20, dim_hidden: int = 512, num_layers: int = 20, dropout: float = 0.2,
                 virtual_node: bool = True, learn_input_norm: bool = True, backend: str | None = None):
        super().__init__()
        sizes = (("dim_in", dim_in, 1), ("dim_hidden", dim_hidden, 1), ("num_layers", num_layers, 0))
        for name, value, least in sizes:
            if int(value) < least:
                raise ValueError(f"GPSE {name} must be at least {least}, got {value}")
        self.dim_in = int(dim_in)
        self.dim_hidden = int(dim_hidden)
        self.num_layers = int(num_layers)
        self.virtual_node = bool(virtual_node)
        self.pre_linear = nn.Linear(self.dim_in, self.dim_hidden, bias=False)
        self.pre_norm = BatchNorm1d(self.dim_hidden, eps=1e-5, momentum=0.1)
        self.learn_input_norm = bool(learn_input_norm)
        self.pre_norm.weight.requires_grad_(self.learn_input_norm)
        self.pre_norm.bias.requires_grad_(self.learn_input_norm)
        self.convs = nn.ModuleList(
            ResGatedConv(self.dim_hidden, self.dim_hidden, bias=False, backend=backend)
            for _ in range(self.num_layers))
        self.norms = nn.ModuleList(
            BatchNorm1d(self.dim_hidden, eps=1e-5, momentum=0.1) for _ in range(self.num_layers))
        self.dropout = Dropout(float(dropout))
        self._backend = backend
        self.reset_parameters()

    # ------------------------------------------------------------------ config
    def to_config(self) -> dict[str, Any]:
        """Constructor arguments (without ``backend``) as a plain dict."""
        config = {"dim_in": self.dim_in, "dim_hidden": self.dim_hidden, "num_layers": self.num_layers,
                  "dropout": self.dropout.p, "virtual_node": self.virtual_node}
        if not self.learn_input_norm:  # only when off: configs of paper-style models stay as they were
            config["learn_input_norm"] = False
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any] | None = None, backend: str | None = None) -> "GPSE":
        """Build from :meth:`to_config` output (missing keys take the paper defaults)."""
        return cls(**dict(config or {}), backend=backend)

    @property
    def backend(self) -> str | None:
        return self._backend

    @backend.setter
    def backend(self, value: str | None):
        self._backend = value
        for conv in self.convs:
            conv.backend = value

    def reset_parameters(self):
        """Re-initialise all weights (PyTorch defaults) and BatchNorm statistics."""
        self.pre_linear.reset_parameters()
        self.pre_norm.reset_parameters()
        for conv, norm in zip(self.convs, self.norms):
            conv.reset_parameters()
            norm.reset_parameters()

    # ------------------------------------------------------------------ forward
    def prepare(self, graph: dgl.DGLGraph) -> tuple[dgl.DGLGraph, VirtualNodeInfo]:
        """The graph the layers run on and its row layout (virtual nodes appended when enabled)."""
        return add_virtual_nodes(graph) if self.virtual_node else no_virtual_nodes(graph)

    def forward_all(self, graph: dgl.DGLGraph, x: torch.Tensor | None = None, *, seed: int | None = None,
                    graph_keys=None) -> tuple[torch.Tensor, VirtualNodeInfo]:
        """Final states of all rows, real nodes first, then one virtual node per graph.

        Parameters
        ----------
        graph : dgl.DGLGraph
            A graph or a batch of graphs (may stay on the CPU while the model is elsewhere).
        x : torch.Tensor, optional
            ``(N, dim_in)`` input features of the real nodes. Default: standard-normal features from
            :func:`~gpse_dgl.nn.random_features.random_node_features` with ``seed``/``graph_keys``
            (``seed=None``: a fresh draw, as in pretraining).

        Returns
        -------
        h : torch.Tensor
            ``(N + B, dim_hidden)`` with virtual nodes, ``(N, dim_hidden)`` without.
        info : VirtualNodeInfo
            ``info.real(h)`` are the node encodings, ``info.virtual(h)`` the virtual-node states.
        """
        aug, info = self.prepare(graph)
        device = self.pre_linear.weight.device
        if x is None:
            x = random_node_features(graph, self.dim_in, seed=seed, graph_keys=graph_keys, device=device)
        if x.shape != (info.num_real, self.dim_in):
            raise ValueError(f"x must have shape ({info.num_real}, {self.dim_in}), got {tuple(x.shape)}")
        if info.num_virtual:
            x = torch.cat([x, x.new_zeros(info.num_virtual, self.dim_in)])
        grad = _wants_grad(self, x)
        h = self.input_stage(x)
        # Without autograd the layers share one projection buffer (see ResGatedConv.forward).
        workspace = (h.new_empty((h.shape[0], 4 * self.dim_hidden), dtype=product_dtype(h))
                     if self.num_layers and not grad else None)
        for layer, conv in enumerate(self.convs):
            h = self.residual_update(layer, h, conv(aug, h, workspace=workspace))
        return self.output_stage(h), info

    # ------------------------------------------------------------------ stages
    # The three stages of the formula in the class docstring. forward_all runs them over the whole
    # graph; layer-wise and sampled inference (gpse_dgl.encode.large_graph) run the same methods over
    # node chunks or sampled blocks, with ResGatedConv's projections for the convolution.
    def input_stage(self, x: torch.Tensor) -> torch.Tensor:
        r""":math:`h^{(0)}` of rows ``x`` (``(n, dim_in)``, zeros for virtual nodes): float32 under autocast."""
        h = to_accumulation(self.pre_linear(x))  # float32 BatchNorm and residual stream under autocast
        return normalized_residual(None, self.pre_norm(h), self.dropout.p, self.dropout.training)

    def residual_update(self, layer: int, h: torch.Tensor, conv_out: torch.Tensor) -> torch.Tensor:
        r""":math:`h + \mathrm{normalize}(\mathrm{ReLU}(\mathrm{Dropout}(\mathrm{BN}_l(c))))` for the output
        ``conv_out`` of convolution ``layer`` on the rows ``h``.

        Without autograd (nothing here or in the encoder requires gradients) the update is done in place:
        ``h`` is updated and returned, and ``conv_out`` may be overwritten (so ``h`` may be a view of a larger
        state).
        """
        norm = self.norms[layer]
        if _wants_grad(self, h, conv_out):
            return normalized_residual(h, norm(conv_out), self.dropout.p, self.dropout.training)
        dropout_off = not self.dropout.training or self.dropout.p == 0
        # one kernel on CUDA (triton); None: no kernel took it or it could not run, h is unchanged
        updated = kernels.run("residual_update_", h, conv_out, norm) if dropout_off else None
        if updated is not None:
            return updated
        return normalized_residual_(h, _batch_norm_(conv_out, norm), self.dropout.p, self.dropout.training)

    def output_stage(self, h: torch.Tensor) -> torch.Tensor:
        """The final row normalisation (in place on ``h`` without autograd)."""
        if _wants_grad(self, h):
            return F.normalize(h, p=2.0, dim=1, eps=EPS)
        return h.div_(torch.linalg.vector_norm(h, dim=1, keepdim=True).clamp_min_(EPS))

    def forward(self, graph: dgl.DGLGraph, x: torch.Tensor | None = None, *, seed: int | None = None,
                graph_keys=None) -> torch.Tensor:
        """GPSE encodings of the real nodes, ``(N, dim_hidden)`` (see :meth:`forward_all`)."""
        h, info = self.forward_all(graph, x, seed=seed, graph_keys=graph_keys)
        return info.real(h)

    def graph_representation(self, graph: dgl.DGLGraph, x: torch.Tensor | None = None, pooling: str = "sum",
                             *, seed: int | None = None, graph_keys=None) -> torch.Tensor:
        """Pooled ``(B, dim_hidden)`` graph states over real nodes and the virtual node (the input of the
        graph head)."""
        h, info = self.forward_all(graph, x, seed=seed, graph_keys=graph_keys)
        return pool(h, info, GPSE_POOLINGS[pooling])


class GPSEForPretraining(nn.Module):
    """GPSE encoder plus pretraining heads.

    Parameters
    ----------
    encoder : GPSE, optional
        Default: ``GPSE()`` (paper sizes).
    heads : GPSEHeads, optional
        Default: ``GPSEHeads(dim_in=encoder.dim_hidden)``.

    Example
    -------
    >>> import dgl
    >>> from gpse_dgl.nn.gpse import GPSE, GPSEForPretraining
    >>> from gpse_dgl.nn.heads import GPSEHeads
    >>> model = GPSEForPretraining(GPSE(dim_hidden=16, num_layers=2), GPSEHeads(dim_in=16, graph_hidden=16))
    >>> g = dgl.batch([dgl.graph(([0, 1], [1, 0])), dgl.graph(([0, 1, 2], [1, 2, 0]))])
    >>> node_pred, graph_pred = model(g)
    >>> node_pred.shape, graph_pred.shape
    (torch.Size([5, 51]), torch.Size([2, 11]))
    """

    def __init__(self, encoder: GPSE | None = None, heads: GPSEHeads | None = None):
        super().__init__()
        self.encoder = encoder if encoder is not None else GPSE()
        self.heads = heads if heads is not None else GPSEHeads(dim_in=self.encoder.dim_hidden)
        if self.heads.dim_in != self.encoder.dim_hidden:
            raise ValueError(f"heads.dim_in ({self.heads.dim_in}) != encoder.dim_hidden "
                             f"({self.encoder.dim_hidden})")

    def to_config(self) -> dict[str, Any]:
        return {"encoder": self.encoder.to_config(), "heads": self.heads.to_config()}

    @classmethod
    def from_config(cls, config: dict[str, Any] | None = None, backend: str | None = None) -> "GPSEForPretraining":
        """Build from :meth:`to_config` output; missing parts/keys take the paper defaults and the heads'
        ``dim_in`` defaults to the encoder width."""
        config = dict(config or {})
        encoder = GPSE.from_config(config.get("encoder"), backend=backend)
        heads_cfg = dict(config.get("heads") or {})
        heads_cfg.setdefault("dim_in", encoder.dim_hidden)
        return cls(encoder, GPSEHeads.from_config(heads_cfg))

    def reset_parameters(self):
        self.encoder.reset_parameters()
        self.heads.reset_parameters()

    def forward(self, graph: dgl.DGLGraph, x: torch.Tensor | None = None, *, seed: int | None = None,
                graph_keys=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(node_pred (N, num_node_targets), graph_pred (B, num_graph_targets))``; ``x`` as in
        :meth:`GPSE.forward_all` (default: fresh random features)."""
        h, info = self.encoder.forward_all(graph, x, seed=seed, graph_keys=graph_keys)
        return self.heads(h, info)
