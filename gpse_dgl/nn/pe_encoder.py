r"""Positional/structural-encoding (PE) encoders for downstream models.

A downstream model sees a precomputed per-node encoding ``pe`` of shape ``(N, dim_in)`` (GPSE's
512-d output, LapPE, RWSE, their concatenation, random features, ...). :class:`PEEncoder` turns it
into a ``dim_pe``-wide embedding, following GPSE's ``GNNNodeEncoder``:

.. math::
    z = \mathrm{Dropout}_{out}\big(f(\mathrm{BN}(\mathrm{Dropout}_{in}(pe)))\big),\qquad
    f \in \{\mathrm{Linear},\ \mathrm{MLP}\}

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

    Example
    -------
    >>> import torch
    >>> enc = PEEncoder(20, 8, model="mlp", batchnorm=True)
    >>> enc(torch.randn(5, 20)).shape
    torch.Size([5, 8])
    """

    def __init__(self, dim_in: int, dim_pe: int, model: str = "linear", batchnorm: bool = False,
                 dropout_in: float = 0.0, dropout_out: float = 0.0, n_layers: int = 2):
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

    def reset_parameters(self):
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.BatchNorm1d)):  # the only parametrised modules here
                module.reset_parameters()

    def forward(self, pe: torch.Tensor) -> torch.Tensor:
        """``(N, dim_in)`` raw encoding -> ``(N, dim_pe)``."""
        if pe.dim() != 2 or pe.shape[1] != self.dim_in:
            raise ValueError(f"PEEncoder expects a (num_nodes, {self.dim_in}) encoding, got {tuple(pe.shape)}")
        return self.dropout_out(self.net(self.norm(self.dropout_in(pe))))


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
