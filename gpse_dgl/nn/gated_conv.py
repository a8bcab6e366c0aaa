"""Residual gated graph convolution (the message-passing layer of GPSE)."""
from __future__ import annotations

import math
import weakref

import torch
from torch import nn
import torch.nn.functional as F

from .. import _env  # noqa: F401
import dgl

from .._private import tensor_version
from . import ops

__all__ = ["ResGatedConv", "product_dtype"]


def product_dtype(feat: torch.Tensor) -> torch.dtype:
    """The dtype of dense products on ``feat``: the autocast dtype where autocast is on for its device
    (as ``F.linear`` would pick), else ``feat``'s own."""
    device_type = feat.device.type
    if feat.is_floating_point() and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return feat.dtype


class ResGatedConv(nn.Module):
    r"""Residual gated graph convolution from `Residual Gated Graph ConvNets
    <https://arxiv.org/abs/1711.07553>`__, as implemented by PyG's ``ResGatedGraphConv``
    (sum aggregation, no edge features).

    .. math::
        h_i^{\prime} = W_{skip} h_i + \sum_{j \rightarrow i} \eta_{ij} \odot (W_{value} h_j + b_{value}) + b

    with the per-edge, per-channel gate

    .. math::
        \eta_{ij} = \sigma\left(W_{key} h_i + b_{key} + W_{query} h_j + b_{query}\right)

    where :math:`i` is the destination and :math:`j` the source of an edge and :math:`\sigma` is the
    sigmoid. The key, query and value maps have a bias, the skip map has none; :math:`b` is an optional
    output bias (PyG's ``bias`` argument; GPSE uses ``bias=False`` because a BatchNorm follows).

    The four maps are stored as one fused ``weight`` of shape ``(4 * out_feats, in_feats)`` whose row
    blocks are key, query, value, skip (in that order) and one ``kqv_bias`` of shape
    ``(3 * out_feats,)``. The gated aggregation is :func:`gpse_dgl.nn.ops.gated_sum`: with
    ``backend="dgl"`` DGL's ``u_add_v`` -> sigmoid -> ``u_mul_e_sum``; with ``"torch"`` (also what
    ``None``/``"auto"`` selects for this op) a chunked torch kernel that recomputes the gates in
    backward instead of storing ``(E, out_feats)`` tensors. The four maps of a graph's nodes are one
    product (:meth:`projections`), whose column blocks the aggregation reads where they are; without
    autograd it is written into a reusable ``(N, 4 * out_feats)`` buffer and the messages are
    accumulated onto the skip term in place.

    Under ``torch.autocast`` the four products run in the autocast dtype (bf16/fp16) and the
    aggregation, with the skip term, in float32: the output is float32 (see :func:`product_dtype`).

    Parameters
    ----------
    in_feats : int
        Input feature size :math:`d_{in}`.
    out_feats : int
        Output feature size :math:`d_{out}`.
    bias : bool, optional
        Learn the output bias :math:`b`. Default: ``True``.
    backend : str, optional
        Message-passing backend, ``"dgl"``, ``"torch"`` or ``"auto"``/``None`` (see
        :mod:`gpse_dgl.nn.ops`).

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.gated_conv import ResGatedConv
    >>> g = dgl.graph(([0, 1, 2, 3, 2, 5], [1, 2, 3, 4, 0, 3]))
    >>> feat = torch.ones(6, 10)
    >>> conv = ResGatedConv(10, 2)
    >>> conv(g, feat).shape
    torch.Size([6, 2])

    On a bipartite block pass ``(src_feat, dst_feat)``; key and skip read the destination features,
    query and value the source features.
    """

    def __init__(self, in_feats: int, out_feats: int, bias: bool = True, backend: str | None = None):
        super().__init__()
        self.in_feats = int(in_feats)
        self.out_feats = int(out_feats)
        self.backend = backend
        self.weight = nn.Parameter(torch.empty(4 * self.out_feats, self.in_feats))
        self.kqv_bias = nn.Parameter(torch.empty(3 * self.out_feats))
        if bias:
            self.bias = nn.Parameter(torch.empty(self.out_feats))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Re-initialise like ``torch.nn.Linear`` (and PyG's ``ResGatedGraphConv``): weights and the
        key/query/value biases uniform in :math:`\\pm 1/\\sqrt{d_{in}}`, output bias zero."""
        bound = 1.0 / math.sqrt(self.in_feats) if self.in_feats > 0 else 0.0
        # kaiming_uniform_(a=sqrt(5)) on each (out, in) block == uniform(-1/sqrt(in), 1/sqrt(in)).
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.kqv_bias, -bound, bound)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return f"{self.in_feats}, {self.out_feats}, bias={self.bias is not None}, backend={self.backend!r}"

    def source_projections(self, feat_src: torch.Tensor, out: torch.Tensor | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(query, value)`` of nodes acting as message sources, each ``(n, out_feats)``.

        Both are column halves of one ``(n, 2 * out_feats)`` product (the gated sum reads rows a stride
        apart where they are). ``out`` is an optional
        ``(n, 2 * out_feats)`` buffer of the product dtype (:func:`product_dtype`) to write it into (so
        that a loop over layers reuses one buffer).

        With :meth:`destination_projections` and :func:`gpse_dgl.nn.ops.gated_sum` this is the layer
        split by node role, for schedules that project sources and destinations separately (layer-wise
        inference over node chunks, sampled blocks: :mod:`gpse_dgl.encode.large_graph`).
        """
        d = self.out_feats
        fused = self._linear(feat_src, self.weight[d:3 * d], self.kqv_bias[d:3 * d], out)
        return fused[:, :d], fused[:, d:]

    def destination_projections(self, feat_dst: torch.Tensor, out: torch.Tensor | None = None
                                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(key, skip)`` of nodes acting as message destinations, column halves of one product (the
        output bias is not in ``skip``: it is added after the aggregation); ``out`` as in
        :meth:`source_projections`."""
        d = self.out_feats
        weight = torch.cat([self.weight[:d], self.weight[3 * d:]])
        bias = torch.cat([self.kqv_bias[:d], self.kqv_bias.new_zeros(d)])
        fused = self._linear(feat_dst, weight, bias, out)
        return fused[:, :d], fused[:, d:]

    @staticmethod
    def _linear(feat: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None):
        """``feat @ weight.T + bias`` in the product dtype, into ``out`` when given (autocast does not apply
        to ``out=`` products, so its dtype is applied here)."""
        if out is None:
            return F.linear(feat, weight, bias)
        dtype = product_dtype(feat)
        if out.dtype != dtype or out.shape != (feat.shape[0], weight.shape[0]):
            raise ValueError(f"out must be {dtype} of shape {(feat.shape[0], weight.shape[0])}, "
                             f"got {out.dtype} {tuple(out.shape)}")
        return torch.addmm(bias.to(dtype), feat.to(dtype), weight.to(dtype).t(), out=out)

    def projections(self, feat: torch.Tensor, workspace: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(key, query, value, skip)`` of the rows ``feat`` (every node both source and destination), the
        column blocks of one ``(n, 4 * out_feats)`` product: one product runs closer to the machine's peak
        than four, under bf16 row buckets its input is cast and padded once, and in backward the input's
        gradient is one product too. ``workspace`` as in :meth:`forward` (without autograd only)."""
        return self._project(feat, feat, workspace)

    def _project(self, feat_src, feat_dst, workspace):
        """``(key, query, value, skip)``, each ``(n, out_feats)`` with contiguous rows."""
        d = self.out_feats
        grad = torch.is_grad_enabled() and (self.weight.requires_grad or self.kqv_bias.requires_grad
                                            or feat_src.requires_grad or feat_dst.requires_grad)
        if grad and feat_src is not feat_dst:
            # The four maps are views of one split: its backward concatenates their weight gradients,
            # where four slices would each zero-fill a gradient of the full (4 d, d) weight first.
            # Created in the order key, query, value, skip: that order fixes how autograd sums the
            # gradients of the inputs (reproducible training).
            weights, biases = self.weight.split(d), self.kqv_bias.split(d)
            return (F.linear(feat_dst, weights[0], biases[0]), F.linear(feat_src, weights[1], biases[1]),
                    F.linear(feat_src, weights[2], biases[2]), F.linear(feat_dst, weights[3]))
        if grad:
            bias = torch.cat([self.kqv_bias, self.kqv_bias.new_zeros(d)])
            return F.linear(feat_src, self.weight, bias).split(d, dim=1)
        if feat_src is not feat_dst:  # a bipartite block: sources and destinations are different rows
            query, value = self.source_projections(feat_src)
            key, skip = self.destination_projections(feat_dst)
            return key, query, value, skip
        # No autograd: the product is written into a buffer that the caller reuses across layers through
        # ``workspace``, so no large tensor is allocated per layer.
        n, dtype = feat_src.shape[0], product_dtype(feat_src)
        if (workspace is None or workspace.dim() != 2 or workspace.shape[0] < n or workspace.shape[1] != 4 * d
                or workspace.dtype != dtype or workspace.device != feat_src.device):
            workspace = feat_src.new_empty((n, 4 * d), dtype=dtype)
        fused = self._linear(feat_src, self._weight_as(dtype), self._bias_as(dtype), workspace[:n])
        return tuple(fused.split(d, dim=1))

    def _weight_as(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight in ``dtype`` for products without autograd, cast once while the weight is unchanged
        (its version counter: optimiser steps and ``load_state_dict`` change it, ``.data`` edits are not
        seen): for a batch of molecules in bf16 the cast costs about a tenth of the product itself."""
        return self._cached("_weight_cast", self.weight, dtype, lambda weight: weight.to(dtype))

    def _bias_as(self, dtype: torch.dtype) -> torch.Tensor:
        """``[kqv_bias, 0]`` in ``dtype``, the bias of the four maps' product without autograd, built once while
        ``kqv_bias`` is unchanged (on a GPU each layer would otherwise launch three small kernels for it); as for
        the weight, edits through ``.data`` are not seen."""
        d = self.out_feats
        return self._cached("_bias_cast", self.kqv_bias, dtype,
                            lambda bias: torch.cat([bias, bias.new_zeros(d)]).to(dtype))

    def _cached(self, slot: str, tensor: torch.Tensor, dtype: torch.dtype, make) -> torch.Tensor:
        """``make(tensor)``, kept in ``slot`` while ``tensor`` is the same object, unchanged (its version
        counter)."""
        if tensor.is_inference():  # inference tensors have no version counter
            return make(tensor)
        key = (dtype, tensor.device, tensor.data_ptr(), tensor_version(tensor))
        cached = self.__dict__.get(slot)
        # the tensor itself too, by weak reference: a replaced parameter can reuse the old one's memory
        if cached is None or cached[0] != key or cached[1]() is not tensor:
            cached = (key, weakref.ref(tensor), make(tensor.detach()))
            self.__dict__[slot] = cached  # not a buffer: never in the state dict
        return cached[2]

    def forward(self, graph: dgl.DGLGraph, feat, *, workspace: torch.Tensor | None = None) -> torch.Tensor:
        """Apply the layer.

        Parameters
        ----------
        graph : dgl.DGLGraph
            The graph (or a block); it may stay on the CPU while ``feat`` is on another device.
        feat : torch.Tensor or pair of torch.Tensor
            ``(N, in_feats)`` node features, or ``(src_feat, dst_feat)`` for a bipartite graph/block.
        workspace : torch.Tensor, optional
            A ``(N, 4 * out_feats)`` scratch buffer (in the product dtype) used when autograd is off, so
            that a stack of layers shares one buffer instead of allocating large tensors per layer. The
            result is then a view into ``workspace``, overwritten by the next call that uses the same
            buffer.

        Returns
        -------
        torch.Tensor
            ``(num_dst_nodes, out_feats)``.
        """
        if isinstance(feat, (tuple, list)):
            feat_src, feat_dst = feat
        elif graph.is_block:
            feat_src, feat_dst = feat, feat[: graph.num_dst_nodes()]
        else:
            feat_src = feat_dst = feat
        key, query, value, skip = self._project(feat_src, feat_dst, workspace)
        if torch.is_grad_enabled() and any(t.requires_grad for t in (key, query, value, skip)):
            out = ops.gated_sum(graph, key, query, value, backend=self.backend) + skip
            return out + self.bias if self.bias is not None else out
        # No autograd: accumulate the messages into the skip term in place (into a float32 copy of it
        # when the products ran in bf16/fp16).
        out = ops.gated_sum(graph, key, query, value, backend=self.backend, out=skip)
        if self.bias is not None:
            out += self.bias
        return out
