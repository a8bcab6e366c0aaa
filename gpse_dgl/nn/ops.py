# size: every message-passing primitive behind one name (ops.<op>), each op's torch, DGL and kernel paths side by
# side under one backend rule; a third of it is the encoder's chunked gated sum and its no-grad paths.
"""Message-passing primitives, on DGL's kernels or on gpse-dgl's own.

``backend="dgl"``   the ``dgl`` path: DGL's fused sparse kernels (``dgl.ops``). The registry's DGL wheels are
                    CPU-only, so this needs the graph and the tensors on a device DGL was built for.
``backend="torch"`` gpse-dgl's own: for :func:`gated_sum`, :func:`relu_sum`, :func:`edge_gated_sum`,
                    :func:`copy_u_sum` and :func:`copy_u_mean`, the ``fused-cpu`` or ``triton`` kernel where one
                    takes the operands (:mod:`gpse_dgl.kernels` picks), else, as for every other op, the
                    ``torch`` path: plain ``torch`` gather / ``index_add_`` over the edge list, which runs wherever
                    torch runs (CUDA with a CPU-only DGL, MPS, ...).

``"auto"`` (the default) is ``"dgl"`` where DGL can run on the tensors' device and ``"torch"`` otherwise,
except for :func:`gated_sum`, :func:`relu_sum` and :func:`edge_gated_sum`, where ``"torch"`` is faster and
leaner, for :func:`copy_u_sum` and :func:`copy_u_mean` on graphs of at most ``kernels.KERNEL_GRAPH_EDGES``
edges where their kernel takes the operands, and on the CPU for graphs of at most ``kernels.SMALL_GRAPH_EDGES``
edges (a training batch of a few dozen molecules), where torch's gathers beat DGL's kernels
(:func:`gpse_dgl.kernels.resolve_backend`).
Override per call (``backend=``), per module (constructor argument) or process-wide with the
``GPSE_DGL_BACKEND`` environment variable; ``gpse-dgl info`` and ``metrics.json`` name the path each op takes.
The paths are tested against each other (values and gradients) in ``tests/test_ops.py``.

All functions take a ``DGLGraph`` (which may stay on the CPU) and tensors on any device; the edge
index is copied to the tensors' device once and cached on the graph object.

Low precision: sums over edges or rows (aggregations, readouts, softmax denominators) accumulate in
float32 when their inputs are bf16 or fp16 (:func:`gpse_dgl.utils.precision.accumulation_dtype`) and
return float32, so under ``torch.autocast`` only the dense products around them run in low precision.
Per-edge results without a sum (``u_add_v``, ``copy_u``) keep their inputs' dtype. The same holds
backwards: the gradient of a gathered row adds up over every edge that read it, and the torch backend
adds it in float32 too.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl.nn import ops
>>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
>>> x = torch.ones(3, 4)
>>> ops.copy_u_sum(g, x, backend="torch").shape
torch.Size([3, 4])
"""
from __future__ import annotations

import functools

import torch

from .. import _env  # noqa: F401
import dgl
from dgl.nn.functional import edge_softmax as _edge_softmax

from .. import kernels
from ..kernels import BACKENDS, dgl_supports, resolve_backend
from ..utils.graph_cache import cached_on_graph
from ..utils.precision import accumulation_dtype, to_accumulation

__all__ = ["BACKENDS", "copy_e_sum", "copy_u", "copy_u_mean", "copy_u_sum", "copy_v", "dgl_supports", "edge_gated_sum",
           "edge_index", "edge_softmax", "gated_sum", "in_degrees", "out_degrees", "readout", "relu_sum",
           "resolve_backend", "segment_ids", "segment_reduce", "u_add_v", "u_dot_v", "u_mul_e_sum"]


def edge_index(graph: dgl.DGLGraph, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src, dst)`` int64 tensors on ``device``; cached on the graph object per device."""
    def build():
        src, dst = graph.edges()
        return src.to(device=device, dtype=torch.int64), dst.to(device=device, dtype=torch.int64)

    return cached_on_graph(graph, "edge_index", str(device), build)


def _dgl_graph_on(graph: dgl.DGLGraph, device: torch.device) -> dgl.DGLGraph:
    if graph.device == device:
        return graph
    return cached_on_graph(graph, "graph_on", str(device), lambda: graph.to(device))


def _scatter_sum(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    values = to_accumulation(values)  # float32 sums for bf16/fp16 values
    out = values.new_zeros((size,) + values.shape[1:])
    return out.index_add_(0, index, values)


def _gather(feat: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``feat[index]`` in float32 for bf16 / fp16 ``feat``.

    The backward of an index adds up the gradients of every edge that read a row, in the dtype of the
    indexed tensor; in bf16 such a sum stops growing after a few hundred terms of one sign (a node of
    degree 1,024 gets half its gradient), so low-precision rows are gathered from a float32 copy.
    ``index_select``, not ``feat[index]``: its backward is an ``index_add_`` (one pass over the rows),
    where indexing's is an ``index_put_`` with accumulation (a sort of the index, every backward).
    """
    return to_accumulation(feat).index_select(0, index)


def _dgl_kernel(kernel, graph, *tensors):
    """``kernel(graph on the tensors' device, *tensors)`` with float32 accumulation.

    bf16/fp16 inputs are converted to float32 at this boundary and autocast is off inside: the sums of
    DGL's kernels accumulate in their input dtype, and DGL 1.1.3 casts the inputs of its kernels to the
    autocast dtype under CUDA autocast.
    """
    device = tensors[0].device
    with torch.autocast(device.type, enabled=False):
        return kernel(_dgl_graph_on(graph, device), *(to_accumulation(t) for t in tensors))


def _fused(op: str, graph, backend, *operands, num_edges: int | None = None, **options):
    """``op`` on its kernel (:func:`gpse_dgl.kernels.run`, with autograd) where the op's own ``"auto"`` rule picks
    ``"torch"`` (``num_edges``: the graph's, for the ops whose rule looks at it) and a kernel takes the operands,
    cast to their promoted dtype (a kernel reads one dtype); None otherwise: the caller's unfused ops run. Called
    once per layer and step: it costs a few microseconds, which a batch of small molecules notices."""
    if resolve_backend(backend, operands[0].device, op, num_edges) != "torch":
        return None
    if len(operands) > 1 and any(t.dtype != operands[0].dtype for t in operands[1:]):
        dtype = functools.reduce(torch.promote_types, (t.dtype for t in operands))
        operands = tuple(t.to(dtype) for t in operands)
    return kernels.run(op, graph, *operands, autograd=True, **options)


def _with_self_term(summed, graph, src_feat, self_weight: float):
    """``self_weight * src_feat[v] + summed[v]`` over the destination nodes (GIN's and GINE's ``(1 + eps) h_v``)."""
    if not self_weight:
        return summed
    return self_weight * src_feat[: graph.num_dst_nodes()].to(summed.dtype) + summed


def u_add_v(graph, src_feat, dst_feat, backend=None):
    """Per edge ``src_feat[u] + dst_feat[v]`` (shape ``(E, ...)``)."""
    if resolve_backend(backend, src_feat.device, num_edges=graph.num_edges()) == "dgl":
        return dgl.ops.u_add_v(_dgl_graph_on(graph, src_feat.device), src_feat, dst_feat)
    src, dst = edge_index(graph, src_feat.device)
    return (_gather(src_feat, src) + _gather(dst_feat, dst)).to(torch.promote_types(src_feat.dtype, dst_feat.dtype))


def u_dot_v(graph, src_feat, dst_feat, backend=None):
    """Per edge dot product over the last dim, keeping it as size 1 (``(E, ..., 1)``)."""
    if resolve_backend(backend, src_feat.device, num_edges=graph.num_edges()) == "dgl":
        return _dgl_kernel(dgl.ops.u_dot_v, graph, src_feat, dst_feat)
    src, dst = edge_index(graph, src_feat.device)
    return (to_accumulation(src_feat)[src] * to_accumulation(dst_feat)[dst]).sum(-1, keepdim=True)


def copy_u(graph, src_feat, backend=None):
    """Per edge ``src_feat[u]`` (a gather: one path on every backend; ``backend`` is taken for a uniform
    signature)."""
    src, _ = edge_index(graph, src_feat.device)
    return _gather(src_feat, src).to(src_feat.dtype)


def copy_v(graph, dst_feat, backend=None):
    """Per edge ``dst_feat[v]`` (a gather, as :func:`copy_u`)."""
    _, dst = edge_index(graph, dst_feat.device)
    return _gather(dst_feat, dst).to(dst_feat.dtype)


def copy_u_sum(graph, src_feat, backend=None, self_weight: float = 0.0):
    """``out[v] = self_weight * src_feat[v] + sum_{u -> v} src_feat[u]`` (``v`` over the destination nodes; the
    self term is GIN's ``(1 + eps) h_v``).

    On the ``"torch"`` path, and on ``"auto"`` up to ``kernels.KERNEL_GRAPH_EDGES`` edges, on the CPU with float32 or
    bfloat16 rows, the fused C++ kernel of :mod:`gpse_dgl.kernels.u_sum` runs (no ``(E, d)`` message, forward or
    backward) when it could be built; otherwise ``"auto"`` picks as for the other ops, and the gathered rows are
    summed (torch) or DGL sums them, the self term added after.
    """
    summed = _fused("copy_u_sum", graph, backend, src_feat, num_edges=graph.num_edges(), self_weight=self_weight)
    if summed is not None:
        return summed
    return _with_self_term(_unfused_copy_u_sum(graph, src_feat, backend), graph, src_feat, self_weight)


def _unfused_copy_u_sum(graph, src_feat, backend):
    """The neighbour sum without its kernel, on the path the other ops' rule picks."""
    if resolve_backend(backend, src_feat.device, num_edges=graph.num_edges()) == "dgl":
        return _dgl_kernel(dgl.ops.copy_u_sum, graph, src_feat)
    src, dst = edge_index(graph, src_feat.device)
    return _scatter_sum(_gather(src_feat, src), dst, graph.num_dst_nodes())


def copy_u_mean(graph, src_feat, backend=None):
    """``out[v] = mean_{u -> v} src_feat[u]`` (0 for nodes without in-edges).

    On the ``"torch"`` path, and on ``"auto"`` up to ``kernels.KERNEL_GRAPH_EDGES`` edges, the kernel of
    :func:`copy_u_sum` divides each sum by the in-degree in the same pass, where it takes the operands; otherwise
    ``"auto"`` picks as for the other ops.
    """
    mean = _fused("copy_u_mean", graph, backend, src_feat, num_edges=graph.num_edges())
    if mean is not None:
        return mean
    if resolve_backend(backend, src_feat.device, num_edges=graph.num_edges()) == "dgl":
        return _dgl_kernel(dgl.ops.copy_u_mean, graph, src_feat)
    total = _unfused_copy_u_sum(graph, src_feat, "torch")
    deg = in_degrees(graph, src_feat.device).clamp(min=1).to(total.dtype)
    return total / deg.view(-1, *([1] * (total.dim() - 1)))


def copy_e_sum(graph, edge_feat, backend=None):
    """``out[v] = sum_{e = (u, v)} edge_feat[e]``."""
    if resolve_backend(backend, edge_feat.device, num_edges=graph.num_edges()) == "dgl":
        return _dgl_kernel(dgl.ops.copy_e_sum, graph, edge_feat)
    _, dst = edge_index(graph, edge_feat.device)
    return _scatter_sum(edge_feat, dst, graph.num_dst_nodes())


def relu_sum(graph, src_feat, edge_feat, backend=None, self_weight: float = 0.0):
    """``out[v] = self_weight * src_feat[v] + sum_{e = (u, v)} relu(src_feat[u] + edge_feat[e])``: GINE's aggregation
    with its self term ``(1 + eps) h_v`` (float32 for bf16/fp16; ``v`` runs over the destination nodes).

    ``"torch"`` On the CPU with float32 or bfloat16 rows of one width: the fused C++ kernel of
                :mod:`gpse_dgl.kernels.relu_sum` (no ``(E, d)`` message tensor, forward or backward), when it
                could be built; otherwise gather, add, ReLU and ``index_add_`` (whose backward is a gather).
    ``"dgl"``   the same messages summed by DGL's ``copy_e_sum``.

    ``None``/``"auto"`` picks ``"torch"`` for this op, as for :func:`gated_sum`: on the CPU the kernel, and
    even the unfused torch sum, beat DGL's (its ``copy_e_sum`` backward materialises a gather of the
    gradient per edge either way). Messages are added in float32 in the kernel and in the inputs' promoted
    dtype on the unfused paths; every sum is float32. The kernel starts each destination's sum at its self term,
    the unfused paths add the self term to the sum: equal up to float32 rounding.
    """
    summed = _fused("relu_sum", graph, backend, src_feat, edge_feat, self_weight=self_weight)
    if summed is not None:
        return summed
    messages = torch.relu(copy_u(graph, src_feat) + edge_feat)
    if resolve_backend(backend, src_feat.device, "relu_sum") == "dgl":
        summed = copy_e_sum(graph, messages, backend="dgl")
    else:
        _, dst = edge_index(graph, src_feat.device)
        summed = _scatter_sum(messages, dst, graph.num_dst_nodes())
    return _with_self_term(summed, graph, src_feat, self_weight)


def edge_gated_sum(graph, src_feat, dst_gate, src_gate, edge_gate, eps: float, backend=None):
    """GatedGCN's aggregation with edge gates: ``(out, logits)`` with, per edge ``e = (u, v)``,
    ``logits[e] = dst_gate[v] + src_gate[u] + edge_gate[e]`` and
    ``out[v] = sum_e sigmoid(logits[e]) * src_feat[u] / (sum_e sigmoid(logits[e]) + eps)`` (sums float32).

    ``"torch"`` On the CPU with float32 or bfloat16 rows of one dtype and width: the fused C++ kernel of
                :mod:`gpse_dgl.kernels.edge_gated_sum` (logits and sums float32, no other ``(E, d)`` tensor,
                forward or backward), when it could be built; otherwise the ops below.
    ``"dgl"``   :func:`u_add_v`, a sigmoid, :func:`u_mul_e_sum` and :func:`copy_e_sum`, each on ``backend``.

    ``None``/``"auto"`` tries the kernel first, as for :func:`relu_sum`, and otherwise lets each op pick its own
    path. The kernel's logits are float32; the unfused path's are in the inputs' promoted dtype.
    """
    result = _fused("edge_gated_sum", graph, backend, src_feat, dst_gate, src_gate, edge_gate, eps=eps)
    if result is not None:
        return result
    logits = u_add_v(graph, src_gate, dst_gate, backend=backend) + edge_gate
    gate = torch.sigmoid(logits)
    numerator = u_mul_e_sum(graph, src_feat, gate, backend=backend)
    denominator = copy_e_sum(graph, gate, backend=backend)
    return numerator / (denominator + eps), logits


def u_mul_e_sum(graph, src_feat, edge_feat, backend=None):
    """``out[v] = sum_{e = (u, v)} src_feat[u] * edge_feat[e]`` (broadcasting like DGL)."""
    if resolve_backend(backend, src_feat.device, num_edges=graph.num_edges()) == "dgl":
        return _dgl_kernel(dgl.ops.u_mul_e_sum, graph, src_feat, edge_feat)
    src, dst = edge_index(graph, src_feat.device)
    return _scatter_sum(_gather(src_feat, src) * to_accumulation(edge_feat), dst, graph.num_dst_nodes())


def in_degrees(graph, device) -> torch.Tensor:
    """In-degree of every destination node as int64 on ``device``."""
    _, dst = edge_index(graph, device)
    return torch.bincount(dst, minlength=graph.num_dst_nodes())


def out_degrees(graph, device) -> torch.Tensor:
    """Out-degree of every source node as int64 on ``device`` (``num_src_nodes`` entries for blocks)."""
    src, _ = edge_index(graph, device)
    return torch.bincount(src, minlength=graph.num_src_nodes())


def edge_softmax(graph, logits, backend=None):
    """Softmax of edge ``logits`` (``(E, ...)``) over the in-edges of each destination node."""
    if resolve_backend(backend, logits.device, num_edges=graph.num_edges()) == "dgl":
        return _dgl_kernel(_edge_softmax, graph, logits)
    logits = to_accumulation(logits)
    _, dst = edge_index(graph, logits.device)
    n = graph.num_dst_nodes()
    idx = dst.view(-1, *([1] * (logits.dim() - 1))).expand_as(logits)
    # Subtract the per-node max for stability (no gradient needed through the max).
    node_max = logits.new_full((n,) + logits.shape[1:], float("-inf"))
    node_max = node_max.scatter_reduce(0, idx, logits.detach(), reduce="amax", include_self=True)
    exp = (logits - node_max[dst]).exp()
    denom = _scatter_sum(exp, dst, n)
    return exp / denom[dst]


def segment_ids(graph: dgl.DGLGraph, device) -> torch.Tensor:
    """Graph index of every node of a batched graph (int64 on ``device``); cached."""
    def build():
        counts = graph.batch_num_nodes().to(device)
        return torch.repeat_interleave(torch.arange(len(counts), device=device), counts)

    return cached_on_graph(graph, "segment_ids", str(device), build)


def readout(graph: dgl.DGLGraph, feat: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Per-graph ``sum``/``mean``/``max`` of node features of a batched graph -> ``(B, ...)``.

    Pure torch, so it runs on any device; graphs without nodes give 0.
    """
    return segment_reduce(feat, segment_ids(graph, feat.device), graph.batch_size, op)


def segment_reduce(feat: torch.Tensor, segment: torch.Tensor, num_segments: int, op: str = "sum") -> torch.Tensor:
    """``sum``/``mean``/``max`` of the rows of ``feat`` grouped by ``segment`` (int64, any order).

    Returns ``(num_segments, ...)``; segments without rows give 0. Pure torch (any device).
    """
    if op == "sum":
        return _scatter_sum(feat, segment, num_segments)
    counts = torch.bincount(segment, minlength=num_segments)
    shape = (-1,) + (1,) * (feat.dim() - 1)
    if op == "mean":
        total = _scatter_sum(feat, segment, num_segments)
        return total / counts.clamp(min=1).to(total.dtype).view(shape)
    if op == "max":
        idx = segment.view(shape).expand_as(feat)
        out = feat.new_full((num_segments,) + feat.shape[1:], float("-inf"))
        out = out.scatter_reduce(0, idx, feat, reduce="amax", include_self=True)
        return torch.where((counts > 0).view(shape), out, torch.zeros_like(out))
    raise ValueError(f"unknown readout {op!r}; choose sum, mean or max")


# Edges per chunk of the no-grad CPU path of ``gated_sum``: a (chunk, d) float tensor stays in cache.
_GATED_CHUNK_BYTES = 1 << 20


def _dst_chunks(graph: dgl.DGLGraph, device: torch.device, chunk_edges: int):
    """Split destination nodes into ranges of about ``chunk_edges`` in-edges; cached on the graph.

    Returns a list of ``(start, stop, src, local_dst)``: the in-edges of destination nodes
    ``start .. stop-1`` sorted (stably) by destination, with ``local_dst = dst - start``, on ``device``.
    """
    return cached_on_graph(graph, "dst_chunks", (str(device), chunk_edges),
                           lambda: _build_dst_chunks(graph, device, chunk_edges))


def _build_dst_chunks(graph, device, chunk_edges: int) -> list:
    layout = kernels.GatedCSR.of(graph)  # the in-edges by destination, stably: the gated-sum kernels' own layout
    indptr, src, n_dst = layout.dst_indptr, layout.dst_index, layout.num_dst
    dst = torch.repeat_interleave(torch.arange(n_dst, dtype=torch.int64), indptr.diff())
    num_edges = int(indptr[-1])
    targets = torch.arange(chunk_edges, max(num_edges, chunk_edges), chunk_edges, dtype=torch.int64)
    cuts = torch.searchsorted(indptr, targets, right=False).tolist()
    bounds = sorted(set([0] + [min(max(c, 1), n_dst) for c in cuts] + [n_dst]))
    chunks = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        lo, hi = int(indptr[a]), int(indptr[b])
        if hi > lo:
            chunks.append((a, b, src[lo:hi].to(device), (dst[lo:hi] - a).to(device)))
    return chunks


def _gated_forward(chunks, dst_gate, src_gate, src_feat, out):
    """Add the gated messages to ``out``; gates and messages are computed in ``out``'s dtype (float32
    for bf16/fp16 inputs, whose rows are gathered in their own dtype, half the bytes)."""
    if not chunks:
        return out
    rows = max(len(c[2]) for c in chunks)
    buf1 = out.new_empty((rows,) + src_feat.shape[1:])
    same = src_feat.dtype == out.dtype
    buf2 = torch.empty_like(buf1) if same else src_feat.new_empty(buf1.shape)
    for a, b, s, d in chunks:
        n = len(s)
        msg = torch.index_select(src_gate, 0, s, out=(buf1 if same else buf2)[:n])
        msg = msg if same else buf1[:n].copy_(msg)
        msg.add_(torch.index_select(dst_gate[a:b], 0, d, out=buf2[:n])).sigmoid_()
        msg.mul_(torch.index_select(src_feat, 0, s, out=buf2[:n]))
        out[a:b].index_add_(0, d, msg)
    return out


class _GatedSum(torch.autograd.Function):
    """Chunked gated aggregation that recomputes the gates in backward (keeps O(N d) memory)."""

    @staticmethod
    def forward(ctx, dst_gate, src_gate, src_feat, chunks, num_dst):
        ctx.chunks = chunks
        ctx.save_for_backward(dst_gate, src_gate, src_feat)
        out = src_feat.new_zeros((num_dst,) + src_feat.shape[1:], dtype=accumulation_dtype(src_feat.dtype))
        return _gated_forward(chunks, dst_gate, src_gate, src_feat, out)

    @staticmethod
    def backward(ctx, grad_out):
        dst_gate, src_gate, src_feat = ctx.saved_tensors
        # gates and gradient sums in float32 for bf16/fp16 inputs; the results take the inputs' dtypes
        acc = accumulation_dtype(src_feat.dtype)
        grad_out = grad_out.to(acc).contiguous()
        need_k, need_q, need_v = ctx.needs_input_grad[:3]
        grad_k = torch.zeros_like(dst_gate, dtype=acc) if need_k else None
        grad_q = torch.zeros_like(src_gate, dtype=acc) if need_q else None
        grad_v = torch.zeros_like(src_feat, dtype=acc) if need_v else None
        for a, b, s, d in ctx.chunks:
            gate = to_accumulation(src_gate.index_select(0, s)).add_(dst_gate[a:b].index_select(0, d)).sigmoid_()
            g = grad_out[a:b].index_select(0, d)
            if need_v:
                grad_v.index_add_(0, s, gate * g)
            if need_k or need_q:
                # d out / d z = g * v[u] * sigmoid'(z),  sigmoid'(z) = gate * (1 - gate)
                dz = to_accumulation(src_feat.index_select(0, s)).mul_(g).mul_(gate)
                dz.sub_(dz * gate)
                if need_k:
                    grad_k[a:b].index_add_(0, d, dz)
                if need_q:
                    grad_q.index_add_(0, s, dz)
        return (None if grad_k is None else grad_k.to(dst_gate.dtype),
                None if grad_q is None else grad_q.to(src_gate.dtype),
                None if grad_v is None else grad_v.to(src_feat.dtype), None, None)


def _contiguous_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when its rows are contiguous (a column slice of a wider projection is), else a copy."""
    return t if t.stride(-1) == 1 else t.contiguous()


def gated_sum(graph, dst_gate, src_gate, src_feat, backend=None, chunk_edges=None, out=None):
    """``out[v] (+)= sum_{e = (u, v)} sigmoid(dst_gate[v] + src_gate[u]) * src_feat[u]``.

    The residual-gated aggregation of ``ResGatedGraphConv`` (``dst_gate`` = key of the destination,
    ``src_gate`` = query and ``src_feat`` = value of the source).

    ``"dgl"``   ``u_mul_e_sum(graph, src_feat, sigmoid(u_add_v(graph, src_gate, dst_gate)))`` with DGL's
                kernels; the ``(E, d)`` gate is materialised (and kept for backward).
    ``"torch"`` The kernel :mod:`gpse_dgl.kernels` picks: ``fused-cpu`` on the CPU with float32 or bfloat16
                rows (one pass over the in-edges of each node, no ``(E, d)`` tensor at all), ``triton`` on
                CUDA without autograd, where each can run. Otherwise the ``torch`` path: edges sorted by
                destination and processed in chunks of ``chunk_edges`` (default on the CPU: about 1 MiB of
                edge features, so each chunk stays in cache; elsewhere one chunk), with a custom backward
                that recomputes the gates. None keeps an ``(E, d)`` tensor, so training memory is O(N d)
                per layer.

    ``None``/``"auto"`` picks ``"torch"`` for this op, unlike the other ops: on the CPU it is faster
    than DGL's kernels for inference and training (and leaner); ``GPSE_DGL_BACKEND`` or an explicit
    argument still selects ``"dgl"``. Both give the same result up to float summation order (in-edges
    of a node are summed in edge-id order in both). ``chunk_edges=0`` means one chunk.

    If ``out`` (``(num_dst_nodes, ...)``) is given the sum is added to it: in place without autograd,
    as ``out + sum`` with autograd. Returns the result.

    bf16/fp16 inputs: the gates, messages and sums are float32 (rows are gathered in the inputs'
    dtype), the result is float32, and a low-precision ``out`` is first copied to float32. The
    ``sigmoid`` gate needs no epsilon (unlike normalised gated aggregations such as graphium's
    GatedGCN, whose ``1e-6`` had to grow for fp16): nothing is divided.
    """
    backend = resolve_backend(backend, src_feat.device, "gated_sum")
    needs_grad = torch.is_grad_enabled() and (
        dst_gate.requires_grad or src_gate.requires_grad or src_feat.requires_grad
        or (out is not None and out.requires_grad))
    if out is not None:
        out = to_accumulation(out)
    if backend == "dgl":
        # float32 gates for bf16/fp16 inputs (converted at the DGL boundary)
        gate = _dgl_kernel(dgl.ops.u_add_v, graph, src_gate, dst_gate).sigmoid_()
        agg = u_mul_e_sum(graph, src_feat, gate, backend="dgl")
    else:
        rows = [_contiguous_rows(t) for t in (dst_gate, src_gate, src_feat)]
        # a kernel adds into out in place without autograd; with autograd it returns the sum alone
        agg = kernels.run("gated_sum", graph, *rows, autograd=needs_grad, out=None if needs_grad else out)
        if agg is None:
            return _torch_gated_sum(graph, *rows, chunk_edges, out, needs_grad)
        if not needs_grad:
            return agg
    if out is None:
        return agg
    return out + agg if needs_grad else out.add_(agg)


def _torch_gated_sum(graph, dst_gate, src_gate, src_feat, chunk_edges, out, needs_grad):
    """The ``torch`` path of :func:`gated_sum` (rows with unit column stride; ``out`` float32 or None)."""
    if chunk_edges is None:
        row_bytes = max(1, src_feat[0:1].numel() * src_feat.element_size())
        chunk_edges = max(64, _GATED_CHUNK_BYTES // row_bytes) if src_feat.device.type == "cpu" else 0
    chunks = _dst_chunks(graph, src_feat.device, int(chunk_edges) or max(1, graph.num_edges()))
    if needs_grad:
        agg = _GatedSum.apply(dst_gate, src_gate, src_feat, chunks, graph.num_dst_nodes())
        return agg if out is None else out + agg
    if out is not None and out.is_contiguous():
        return _gated_forward(chunks, dst_gate, src_gate, src_feat, out)
    # index_add_ into rows a stride apart (a column block of a wider projection) runs several times
    # slower than into contiguous rows: sum into a fresh tensor, then add
    agg = _gated_forward(chunks, dst_gate, src_gate, src_feat, src_feat.new_zeros(
        (graph.num_dst_nodes(),) + src_feat.shape[1:], dtype=accumulation_dtype(src_feat.dtype)))
    return agg if out is None else out.add_(agg)
