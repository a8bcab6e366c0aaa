"""The GPSE encoder as plain tensors and functions, for inference schedules the module cannot express.

:class:`gpse_dgl.nn.gpse.GPSE` computes all layers for one (batched) graph at once. Large graphs need
other schedules: layer by layer over node chunks (:mod:`.large_graph`) or on sampled DGL blocks. Both use
the eval-mode encoder written out here (``docs/PSE.md``, "Model")::

    h0   = normalise(ReLU(BN0(x W_pre^T)))                       virtual nodes have x = 0
    c_i  = W_skip h_i + sum_{j -> i} sigmoid(W_key h_i + b_key + W_query h_j + b_query) * (W_value h_j + b_value)
    h_i <- h_i + normalise(ReLU(BN_l(c_i)))                      for l = 1..L
    out  = normalise(h)

BatchNorm in eval mode is the per-column affine map ``c * scale + shift``; dropout is the identity.
Under ``torch.autocast`` the products (``@``, ``addmm``) run in the autocast dtype; the affine maps,
norms and the state ``h`` stay float32 (the affine parameters are float32 and promote the products).
The functions here are checked against the module's own forward in ``tests/test_encode_large.py``.
:meth:`EncoderWeights.from_model` reads the tensors of a :class:`~gpse_dgl.nn.gpse.GPSE`.

Example
-------
>>> import torch
>>> from gpse_dgl.encode.functional import EncoderWeights
>>> w = EncoderWeights.random(dim_in=4, dim=8, num_layers=2, seed=0)
>>> w.pre_layer(torch.randn(3, 4)).shape
torch.Size([3, 8])
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import _env  # noqa: F401
from ..nn import ops

__all__ = ["Affine", "LayerWeights", "EncoderWeights", "gated_conv", "layer_update"]


@dataclass
class Affine:
    """Eval-mode BatchNorm as ``x * scale + shift`` (per column)."""

    scale: torch.Tensor
    shift: torch.Tensor

    @classmethod
    def from_batchnorm(cls, weight, bias, running_mean, running_var, eps: float) -> "Affine":
        """Fold ``(x - mean) / sqrt(var + eps) * weight + bias`` into one scale and shift."""
        scale = weight / torch.sqrt(running_var + eps)
        return cls(scale=scale, shift=bias - running_mean * scale)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.shift, x, self.scale)

    def to(self, device) -> "Affine":
        return Affine(self.scale.to(device), self.shift.to(device))


@dataclass
class LayerWeights:
    """One gated-conv layer: ``(weight, bias)`` of the key / query / value maps, the skip weight, the BN.

    Query and value act on *source* nodes, key and skip on *destination* nodes, which lets large-graph
    schedules compute them for different node sets.
    """

    w_key: torch.Tensor
    b_key: torch.Tensor
    w_query: torch.Tensor
    b_query: torch.Tensor
    w_value: torch.Tensor
    b_value: torch.Tensor
    w_skip: torch.Tensor
    norm: Affine
    b_out: torch.Tensor | None = None

    @classmethod
    def from_linears(cls, key, query, value, skip, norm: Affine, bias=None) -> "LayerWeights":
        """From ``(weight, bias)`` pairs of the key / query / value maps, the skip weight and the optional
        output bias (added to the skip term)."""
        return cls(key[0], key[1], query[0], query[1], value[0], value[1], skip, norm, bias)

    @property
    def dim(self) -> int:
        return self.w_skip.shape[0]

    def source_projections(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(query, value)`` of nodes ``h`` acting as message sources (contiguous, for DGL's kernels)."""
        return torch.addmm(self.b_query, h, self.w_query.t()), torch.addmm(self.b_value, h, self.w_value.t())

    def destination_projections(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(key, skip)`` of nodes ``h`` acting as message destinations (skip includes the output bias)."""
        skip = h @ self.w_skip.t() if self.b_out is None else torch.addmm(self.b_out, h, self.w_skip.t())
        return torch.addmm(self.b_key, h, self.w_key.t()), skip

    def to(self, device) -> "LayerWeights":
        return LayerWeights(*(t.to(device) for t in (self.w_key, self.b_key, self.w_query, self.b_query,
                                                      self.w_value, self.b_value, self.w_skip)),
                            self.norm.to(device), None if self.b_out is None else self.b_out.to(device))


@dataclass
class EncoderWeights:
    """All tensors of an eval-mode GPSE encoder (pre-layer, gated-conv layers, final normalisation)."""

    w_pre: torch.Tensor
    b_pre: torch.Tensor | None
    pre_norm: Affine
    layers: list
    final_normalize: bool = True
    virtual_node: bool = True

    @property
    def dim_in(self) -> int:
        return self.w_pre.shape[1]

    @property
    def dim(self) -> int:
        return self.w_pre.shape[0]

    def to(self, device) -> "EncoderWeights":
        return EncoderWeights(self.w_pre.to(device), None if self.b_pre is None else self.b_pre.to(device),
                              self.pre_norm.to(device), [layer.to(device) for layer in self.layers],
                              self.final_normalize, self.virtual_node)

    def pre_layer(self, x: torch.Tensor) -> torch.Tensor:
        """``normalise(ReLU(BN(x W^T + b)))`` row by row."""
        h = x @ self.w_pre.t() if self.b_pre is None else torch.addmm(self.b_pre, x, self.w_pre.t())
        return F.normalize(torch.relu_(self.pre_norm(h)), p=2, dim=-1)

    def finish(self, h: torch.Tensor) -> torch.Tensor:
        """The final row normalisation (in place when enabled)."""
        if not self.final_normalize:
            return h
        return h.div_(h.norm(p=2, dim=-1, keepdim=True).clamp_min_(1e-12))

    @classmethod
    def from_model(cls, model) -> "EncoderWeights":
        """The (detached) tensors of a :class:`~gpse_dgl.nn.gpse.GPSE` (or ``GPSEForPretraining``)."""
        encoder = getattr(model, "encoder", model)

        def bn(norm):
            return Affine.from_batchnorm(norm.weight.detach(), norm.bias.detach(), norm.running_mean,
                                         norm.running_var, norm.eps)

        layers = []
        for conv, norm in zip(encoder.convs, encoder.norms):
            d = conv.out_feats
            w, b = conv.weight.detach(), conv.kqv_bias.detach()
            layers.append(LayerWeights.from_linears(
                (w[:d], b[:d]), (w[d:2 * d], b[d:2 * d]), (w[2 * d:3 * d], b[2 * d:]), w[3 * d:], bn(norm),
                None if conv.bias is None else conv.bias.detach()))
        pre_bias = encoder.pre_linear.bias
        return cls(encoder.pre_linear.weight.detach(), None if pre_bias is None else pre_bias.detach(),
                   bn(encoder.pre_norm), layers, final_normalize=True, virtual_node=encoder.virtual_node)

    @classmethod
    def random(cls, dim_in: int = 20, dim: int = 512, num_layers: int = 20, seed: int = 0) -> "EncoderWeights":
        """Random weights of the right shapes, for tests and examples."""
        gen = torch.Generator().manual_seed(seed)

        def mat(rows, cols):
            return torch.randn(rows, cols, generator=gen) / cols ** 0.5

        def vec(n, scale=0.1):
            return torch.randn(n, generator=gen) * scale

        def norm():
            return Affine(1 + vec(dim), vec(dim))

        layers = [LayerWeights.from_linears((mat(dim, dim), vec(dim)), (mat(dim, dim), vec(dim)),
                                            (mat(dim, dim), vec(dim)), mat(dim, dim), norm())
                  for _ in range(num_layers)]
        return cls(mat(dim, dim_in), None, norm(), layers)


def gated_conv(block, query: torch.Tensor, value: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``sum_{j -> i} sigmoid(key_i + query_j) * value_j`` over the edges of ``block``.

    ``block`` is any DGL graph or block whose source rows index ``query``/``value`` and destination
    rows index ``key``. :func:`gpse_dgl.nn.ops.gated_sum` does the work: on the CPU in cache-sized
    edge chunks (about 25 % faster than one large ``E x d`` gate on an arXiv-size graph), elsewhere
    with one ``E x d`` temporary.
    """
    return ops.gated_sum(block, key, query, value)


def layer_update(h_dst: torch.Tensor, conv: torch.Tensor, norm: Affine) -> torch.Tensor:
    """``h_dst += normalise(ReLU(BN(conv)))`` in place (``conv`` is overwritten); returns ``h_dst``.

    Safe on a view of the full state because callers compute every projection of a layer before
    updating any of its rows.
    """
    out = torch.relu_(torch.addcmul(norm.shift, conv, norm.scale, out=conv))
    return h_dst.addcdiv_(out, out.norm(p=2, dim=-1, keepdim=True).clamp_min_(1e-12))
