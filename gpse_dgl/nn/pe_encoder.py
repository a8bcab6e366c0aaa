r"""Positional/structural-encoding (PE) encoders for downstream models.

A downstream model sees a precomputed per-node encoding ``pe`` of shape ``(N, dim_in)`` (GPSE's
512-d output, LapPE, RWSE, their concatenation, random features, ...). :class:`PEEncoder` turns it
into a ``dim_pe``-wide embedding, following GPSE's ``GNNNodeEncoder``:

.. math::
    z = \mathrm{Dropout}_{out}\big(f(\mathrm{BN}(\mathrm{Dropout}_{in}((pe - \mu) / s)))\big),\qquad
    f \in \{\mathrm{Linear},\ \mathrm{MLP}\}

where :math:`\mu, s` are fixed per-column statistics of the training split (``shift``/``scale``; none by
default). Raw encodings are heavy-tailed and of very different scales per column (RWSE's odd steps are
zero except on nodes of odd rings, so a column has a mean of 0.001 and rare values of 0.17); without
fixed statistics the BatchNorm sees a different scale in every batch, and the training and evaluation
normalisations disagree. NaN entries (padding of encodings wider than a graph) read as 0.

:func:`build_pe_encoder` builds any PE encoder from its plain-dict config (``kind``: ``linear``/``mlp``
here, ``deepset`` :class:`~gpse_dgl.nn.lap_pe_encoder.LapPEDeepSet`, ``noise``
:class:`~gpse_dgl.nn.noise_encoder.NormalNoise`).

and :class:`NodeEncoderWithPE` concatenates it to the node-feature embedding, so that
``dim_hidden = (dim_hidden - dim_pe) + dim_pe`` as in GraphGPS's concatenating node encoders.

Example
-------
>>> import torch
>>> from gpse_dgl.nn.pe_encoder import PEEncoder, NodeEncoderWithPE
>>> from gpse_dgl.nn.feature_encoders import AtomEncoder
>>> pe_encoder = PEEncoder(512, 20, model="linear", batchnorm=True, dropout_in=0.3, dropout_out=0.1)
>>> encoder = NodeEncoderWithPE(AtomEncoder(64 - 20), pe_encoder)
>>> encoder(torch.zeros(7, 9, dtype=torch.long), torch.randn(7, 512)).shape
torch.Size([7, 64])
"""
from __future__ import annotations

import torch
from torch import nn

from .batch_norm import BatchNorm1d
from .dropout import Dropout
from .lap_pe_encoder import LapPEDeepSet
from .noise_encoder import NormalNoise

PE_MODELS = ("linear", "mlp")


class PEEncoder(nn.Module):
    r"""Encode a raw per-node encoding into ``dim_pe`` features.

    dropout on the raw encoding -> optional ``BatchNorm1d`` -> ``Linear`` or MLP -> dropout.

    The MLP is GPSE's: ``n_layers`` linear layers ``dim_in -> 2 dim_pe -> ... -> 2 dim_pe -> dim_pe``,
    each followed by ReLU (including the last, as in the reference; ``n_layers=1`` is
    ``Linear(dim_in, dim_pe)`` + ReLU).

    Parameters
    ----------
    dim_in : int
        Width of the raw encoding (512 for GPSE).
    dim_pe : int
        Width of the output embedding.
    model : {"linear", "mlp"}
        Encoder network (case-insensitive).
    batchnorm : bool
        Apply ``BatchNorm1d`` to the (dropped-out) raw encoding.
    dropout_in : float
        Dropout on the raw encoding ("input dropout" in the paper's tables).
    dropout_out : float
        Dropout on the output embedding ("output dropout").
    n_layers : int
        Number of linear layers of the MLP (ignored for ``"linear"``).
    shift, scale : sequence of float, optional
        Fixed per-column standardisation ``(pe - shift) / scale`` applied first (kept as buffers, so a
        checkpoint carries them).

    Example
    -------
    >>> import torch
    >>> enc = PEEncoder(20, 8, model="mlp", batchnorm=True)
    >>> enc(torch.randn(5, 20)).shape
    torch.Size([5, 8])
    """

    def __init__(self, dim_in: int, dim_pe: int, model: str = "linear", batchnorm: bool = False,
                 dropout_in: float = 0.0, dropout_out: float = 0.0, n_layers: int = 2, shift=None, scale=None):
        super().__init__()
        model = model.lower()
        if model not in PE_MODELS:
            raise ValueError(f"unknown PE encoder model {model!r}; choose one of {PE_MODELS}")
        if n_layers < 1:
            raise ValueError(f"PE encoder n_layers must be >= 1, got {n_layers}")
        self.dim_in, self.dim_pe, self.model = dim_in, dim_pe, model
        self.dropout_in = Dropout(dropout_in)
        self.norm = BatchNorm1d(dim_in) if batchnorm else nn.Identity()
        self.net = nn.Linear(dim_in, dim_pe) if model == "linear" else _relu_mlp(dim_in, dim_pe, n_layers)
        self.dropout_out = Dropout(dropout_out)
        self.standardized = shift is not None
        if self.standardized:
            self.register_buffer("shift", torch.as_tensor(shift, dtype=torch.float32).reshape(dim_in))
            self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.float32).reshape(dim_in))

    def reset_parameters(self):
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.BatchNorm1d)):  # the only parametrised modules here
                module.reset_parameters()

    def forward(self, pe: torch.Tensor) -> torch.Tensor:
        """``(N, dim_in)`` raw encoding -> ``(N, dim_pe)``."""
        if pe.dim() != 2 or pe.shape[1] != self.dim_in:
            raise ValueError(f"PEEncoder expects a (num_nodes, {self.dim_in}) encoding, got {tuple(pe.shape)}")
        pe = torch.nan_to_num(pe, nan=0.0) if not self.standardized else \
            torch.nan_to_num((pe - self.shift.to(pe.dtype)) / self.scale.to(pe.dtype), nan=0.0)
        return self.dropout_out(self.net(self.norm(self.dropout_in(pe))))


def build_pe_encoder(config: dict) -> nn.Module:
    """A PE encoder from its plain-dict config: ``kind`` plus the class's keyword arguments.

    ``kind`` ``linear``/``mlp`` is :class:`PEEncoder` (a config without ``kind``, as older checkpoints
    hold, too), ``deepset`` :class:`~gpse_dgl.nn.lap_pe_encoder.LapPEDeepSet`, ``noise``
    :class:`~gpse_dgl.nn.noise_encoder.NormalNoise`.

    >>> build_pe_encoder({"kind": "linear", "dim_in": 20, "dim_pe": 8}).dim_pe
    8
    """
    kwargs = dict(config)
    kind = kwargs.pop("kind", kwargs.get("model", "linear"))
    if kind in PE_MODELS:
        return PEEncoder(**dict(kwargs, model=kind))
    classes = {"deepset": LapPEDeepSet, "noise": NormalNoise}
    if kind not in classes:
        raise ValueError(f"unknown PE encoder kind {kind!r}; choose one of {PE_MODELS + tuple(classes)}")
    return classes[kind](**kwargs)


def _relu_mlp(dim_in: int, dim_out: int, n_layers: int) -> nn.Sequential:
    widths = [dim_in] + [2 * dim_out] * (n_layers - 1) + [dim_out]
    layers = []
    for width_in, width_out in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    return nn.Sequential(*layers)


class NodeEncoderWithPE(nn.Module):
    """Node-feature embedding concatenated with an encoded PE: ``[node_encoder(x) || pe_encoder(pe)]``.

    Parameters
    ----------
    node_encoder : nn.Module
        Maps node features to ``dim_hidden - dim_pe`` columns (see :mod:`gpse_dgl.nn.feature_encoders`).
    pe_encoder : PEEncoder, optional
        Without it the module is just ``node_encoder`` and ``pe`` must be ``None``.

    ``forward(node_feat, pe=None) -> (N, dim_node + dim_pe)``.
    """

    def __init__(self, node_encoder: nn.Module, pe_encoder: PEEncoder | None = None):
        super().__init__()
        self.node_encoder = node_encoder
        self.pe_encoder = pe_encoder

    def forward(self, node_feat, pe: torch.Tensor | None = None) -> torch.Tensor:
        h = self.node_encoder(node_feat)
        if self.pe_encoder is None:
            if pe is not None:
                raise ValueError("a PE was given but the model was built without pe_encoder")
            return h
        if pe is None:
            raise ValueError("the model was built with a pe_encoder: pass pe=(num_nodes, dim_in) tensor")
        return torch.cat([h, self.pe_encoder(pe.to(h.dtype))], dim=-1)
