"""Encode graphs with a pretrained GPSE: one batched graph (:func:`encode`) or a whole dataset
(:func:`encode_dataset`), exactly and reproducibly.

* **Eval mode.** BatchNorm uses its running statistics and dropout is off while encoding; the model's
  previous mode is restored afterwards. No autograd graph is recorded.
* **Input graphs** are given *without* virtual nodes (the encoder adds its own). GPSE was pretrained on
  simple undirected graphs, so by default each graph is replaced by its simple undirected version
  (:func:`~gpse_dgl.encode.graphs.as_simple_undirected`: directed edges such as ogbn-arxiv's citations
  are symmetrised, self-loops and duplicates dropped); graphs that already are simple and undirected are
  used as they are. ``undirected=False`` uses the edges as given, like PyG's ``precompute_GPSE``.
* **Reproducible features.** With an integer ``seed``, each graph's random input features come from
  its own generator seeded by ``(seed, hash of the graph's structure)``
  (:func:`~gpse_dgl.nn.random_features.random_node_features`), so a graph's encoding does not depend on
  the batch it is in, the batch size, the dataset order or the device. ``seed=None`` draws fresh
  features every call (the reference behaviour). ``samples=K`` averages the encodings of ``K``
  independent draws (draw ``k`` uses :func:`~gpse_dgl.encode.graphs.sample_seed`); the average of unit
  vectors is not renormalised.
* **Precision.** ``precision="bf16"`` (or ``"fp16"`` on a CUDA GPU) runs the dense products in that
  precision under ``torch.autocast`` while sums, norms and the residual stream stay float32
  (:mod:`gpse_dgl.utils.precision`); the encodings are float32 in every precision. Within one
  precision and device a graph's encoding still does not depend on its batch.
* **Large graphs.** A batch whose plain forward would need more than ``max_forward_bytes`` of
  activations is encoded layer by layer instead (:func:`~gpse_dgl.encode.large_graph.layerwise_forward`,
  exact up to float rounding); :func:`encode_large` and :func:`encode_sampled` are the explicit forms.

Example
-------
>>> import dgl
>>> from gpse_dgl.nn.gpse import GPSE
>>> from gpse_dgl.encode import encode, encode_dataset
>>> model = GPSE(dim_hidden=16, num_layers=2).eval()
>>> ring = dgl.graph(([0, 1, 2], [1, 2, 0]))                  # directed: symmetrised first
>>> encode(model, ring, seed=0).shape
torch.Size([3, 16])
>>> out = encode_dataset(model, [ring, ring], batch_size=1, progress=False)
>>> bool((out[0] == out[1]).all())                              # same graph, same encoding
True
"""
from __future__ import annotations

import contextlib
import itertools
from typing import Sequence

import torch

from .. import _env  # noqa: F401
import dgl

from .. import kernels
from ..nn.random_features import random_node_features
from ..utils.precision import Precision, as_precision
from ..utils.progress import progress as progress_bar
from .graphs import as_simple_undirected, is_simple_undirected, sample_seed
from .large_graph import DEFAULT_CHUNK_EDGES, DEFAULT_FANOUTS, layerwise_forward, sampled_forward

__all__ = ["encode", "encode_dataset", "encode_large", "encode_sampled", "bare_encoder", "model_device", "target_device", "layer_by_layer",
           "MAX_FORWARD_BYTES", "DEFAULT_BATCH_SIZE"]

# Above this estimated activation size a batch is encoded layer by layer (see forward_bytes).
MAX_FORWARD_BYTES = 1 << 30
#: Graphs per forward pass of :func:`encode_dataset` unless told otherwise (it does not change the result).
DEFAULT_BATCH_SIZE = 256


def bare_encoder(model):
    """The bare encoder of a ``GPSE`` or ``GPSEForPretraining``."""
    return getattr(model, "encoder", model)


def model_device(model) -> torch.device:
    """Where the model's weights are (what the encoding runs on unless a device is given)."""
    return bare_encoder(model).pre_linear.weight.device


def target_device(model, device=None) -> torch.device:
    """The device an encoding runs on: ``device`` where given, else the model's (:func:`model_device`). What
    ``"auto"`` precision is decided for."""
    return torch.device(device) if device is not None else model_device(model)


@contextlib.contextmanager
def _inference(model, device, precision: Precision):
    """Eval mode, no autograd and ``precision``'s autocast for the duration; every module's train/eval flag
    is restored after. A model already on ``device`` and in eval mode is left alone: a dataset is encoded
    one batch at a time, and walking the modules per batch cost a tenth of a molecule batch on a GPU."""
    encoder = bare_encoder(model)
    if device is not None and not _on_device(encoder, torch.device(device)):
        encoder.to(device)
    modes = [(module, module.training) for module in encoder.modules()]
    if any(training for _, training in modes):
        encoder.eval()
    try:
        with torch.no_grad(), precision.autocast(device if device is not None else model_device(model)):
            yield encoder
    finally:
        for module, training in modes:
            module.training = training


def _on_device(encoder, device: torch.device) -> bool:
    """Whether every parameter and buffer of ``encoder`` is on ``device`` (``cuda`` without an index means the
    current GPU, as for ``.to``; another type without an index means any device of that type)."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    tensors = itertools.chain(encoder.parameters(), encoder.buffers())
    if device.index is None:
        return all(t.device.type == device.type for t in tensors)
    return all(t.device == device for t in tensors)


def forward_bytes(g: dgl.DGLGraph, dim: int, device, num_graphs: int | None = None) -> int:
    """Estimated activation memory of one plain no-grad forward over ``g`` (virtual nodes included).

    About six ``(N + B) x dim`` float tensors (state, four projections, aggregate), plus one gate per edge
    where the torch ops of :func:`gpse_dgl.nn.ops.gated_sum` run on a GPU. The CPU kernels and the GPU's
    Triton kernels hold no gate per edge (on the CPU's torch path edges go in small chunks), except for the
    virtual node's ``N`` in-edges. ``num_graphs`` is ``B`` when known (default ``g.batch_size``).
    """
    nodes = g.num_nodes()
    rows = nodes + (g.batch_size if num_graphs is None else num_graphs)
    per_edge = torch.device(device).type != "cpu" and not kernels.available("triton")
    edges = g.num_edges() + 2 * nodes if per_edge else nodes
    return 4 * dim * (6 * rows + edges)


def _prepare(g: dgl.DGLGraph, undirected: bool) -> dgl.DGLGraph:
    return as_simple_undirected(g) if undirected else g


def _check_x(x: torch.Tensor, g: dgl.DGLGraph, dim_in: int, samples: int) -> None:
    if samples != 1:
        raise ValueError("samples > 1 needs random features drawn here; do not pass x")
    if tuple(x.shape) != (g.num_nodes(), dim_in):
        raise ValueError(f"x must have shape ({g.num_nodes()}, {dim_in}), got {tuple(x.shape)}")


def _draws(encoder, g, x, seed, samples, device):
    """Input features of each of the ``samples`` draws, on ``device``."""
    if x is not None:
        yield x.to(device=device, dtype=torch.float32)
        return
    for k in range(samples):
        sub_seed = None if seed is None else sample_seed(seed, k)
        yield random_node_features(g, encoder.dim_in, seed=sub_seed, device=device)


@contextlib.contextmanager
def _large_graph_inference(model, g, x, seed, samples, device, undirected, precision):
    """Shared setup of :func:`encode_large` and :func:`encode_sampled`: yields ``(the encoder on the
    device, the prepared graph, the input-feature draws)`` with the model in inference mode."""
    device = target_device(model, device)
    with _inference(model, device, as_precision(precision, device)) as encoder:
        if x is not None:
            _check_x(x, g, encoder.dim_in, samples)
        prepared = _prepare(g, undirected)
        yield encoder, prepared, _draws(encoder, prepared, x, seed, samples, device)


def _average(encodings) -> torch.Tensor:
    total, count = None, 0
    for enc in encodings:
        total = enc if total is None else total.add_(enc)
        count += 1
    return total if count == 1 else total.div_(count)


def _forward(encoder, g, x, device, max_forward_bytes, chunk_edges, progress) -> torch.Tensor:
    """One exact forward: the module's own, or layer by layer when it would need too much memory."""
    if forward_bytes(g, encoder.dim_hidden, device) <= max_forward_bytes:
        return encoder(g, x)
    return layerwise_forward(encoder, g, x, chunk_edges=chunk_edges, progress=progress)


def encode(model, g: dgl.DGLGraph, x: torch.Tensor | None = None, seed: int | None = 0, samples: int = 1,
           batch_size: int | None = None, device=None, undirected: bool = True,
           max_forward_bytes: int = MAX_FORWARD_BYTES, precision: Precision | str = "fp32") -> torch.Tensor:
    """GPSE encodings of every node of a graph or batched graph.

    Parameters
    ----------
    model : GPSE or GPSEForPretraining
        A pretrained encoder (:func:`~gpse_dgl.encode.load_gpse`); run in eval mode here.
    g : DGLGraph
        Graph or ``dgl.batch`` of graphs, without virtual nodes, on the CPU.
    x : Tensor, optional
        ``(g.num_nodes(), model.dim_in)`` input features to use instead of random ones.
    seed : int or None
        Seed of the random features (see the module docstring); None: a fresh draw.
    samples : int
        Average the encodings of this many draws of random features.
    batch_size : int, optional
        Member graphs per forward pass (default: all at once). Does not change the result.
    device : str or torch.device, optional
        Where to compute (the model is moved there); default: the model's device.
    undirected : bool
        Encode the simple undirected version of each graph (default; see the module docstring).
    max_forward_bytes : int
        Activation budget of a plain forward; larger batches are encoded layer by layer.
    precision : Precision or str
        ``"fp32"`` (default, the reference), ``"bf16"``, ``"fp16"`` (CUDA only) or ``"auto"`` for the dense
        products (see the module docstring), or a precision an entry point decided
        (:func:`~gpse_dgl.utils.precision.decide_precision`); the encodings are float32 in every case.

    Returns
    -------
    Tensor
        ``(g.num_nodes(), model.dim_hidden)`` float32 on the CPU, rows in node order.

    Examples
    --------
    >>> import dgl
    >>> from gpse_dgl.nn.gpse import GPSE
    >>> model = GPSE(dim_hidden=8, num_layers=2)
    >>> g = dgl.batch([dgl.graph(([0, 1], [1, 0])), dgl.graph(([0, 1, 2], [1, 2, 0]))])
    >>> encode(model, g, batch_size=1).shape
    torch.Size([5, 8])
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    device = target_device(model, device)
    with _inference(model, device, as_precision(precision, device)) as encoder:
        if x is not None:
            _check_x(x, g, encoder.dim_in, samples)
        prepared = _prepare(g, undirected)
        if batch_size is None or prepared.batch_size <= batch_size:
            parts, xs = [prepared], [x]
        else:
            members = dgl.unbatch(prepared)
            parts = [dgl.batch(members[i:i + batch_size]) for i in range(0, len(members), batch_size)]
            xs = [None] * len(parts) if x is None else list(x.split([p.num_nodes() for p in parts]))
        out = []
        for part, x_part in zip(parts, xs):
            out.append(_average(_forward(encoder, part, xk, device, max_forward_bytes, DEFAULT_CHUNK_EDGES,
                                         False).cpu()
                                for xk in _draws(encoder, part, x_part, seed, samples, device)))
        return torch.cat(out) if len(out) > 1 else out[0]


def encode_large(model, g: dgl.DGLGraph, x: torch.Tensor | None = None, seed: int | None = 0,
                 samples: int = 1, device=None, undirected: bool = True,
                 chunk_edges: int = DEFAULT_CHUNK_EDGES, progress: bool = False,
                 shard: bool = False, precision: Precision | str = "fp32") -> torch.Tensor:
    """Exact encodings of a large graph with bounded memory (layer by layer over node chunks).

    Same result as :func:`encode` up to float rounding, holding only the current layer's state (see
    :mod:`gpse_dgl.encode.large_graph`). Parameters as in :func:`encode`, plus ``chunk_edges`` (most
    edge gates held at once), ``progress`` (a bar over layers) and ``shard`` (under torchrun: every
    rank calls it with the same graph and computes its share of every layer; see
    :func:`~gpse_dgl.encode.large_graph.layerwise_forward`). In bf16/fp16 the sources' query and value
    (``2 x N x d``) take half the memory.

    Examples
    --------
    >>> import dgl
    >>> from gpse_dgl.nn.gpse import GPSE
    >>> model = GPSE(dim_hidden=8, num_layers=2)
    >>> g = dgl.rand_graph(500, 2000)
    >>> encode_large(model, g).shape
    torch.Size([500, 8])
    """
    with _large_graph_inference(model, g, x, seed, samples, device, undirected, precision) as (
            encoder, prepared, draws):
        return _average(layerwise_forward(encoder, prepared, xk, chunk_edges=chunk_edges, progress=progress,
                                          shard=shard).cpu()
                        for xk in draws)


def encode_sampled(model, g: dgl.DGLGraph, x: torch.Tensor | None = None, seed: int | None = 0,
                   samples: int = 1, fanouts: Sequence[int] = DEFAULT_FANOUTS, batch_size: int | None = None,
                   device=None, undirected: bool = True, nodes: torch.Tensor | None = None,
                   progress: bool = False, precision: Precision | str = "fp32") -> torch.Tensor:
    """Approximate encodings from neighbour-sampled computation graphs (DGL's MultiLayerNeighborSampler).

    ``fanouts`` lists the neighbours sampled per node, nearest hop (the last layer) first, the last
    value repeating for the remaining layers: the paper's ogbn-proteins setting ``(30, 20, 10, 5)``.
    The virtual node is sampled like any neighbour and aggregates only its sampled in-neighbours, so
    encodings are approximations, exact only when every fan-out covers the largest in-degree (the
    virtual node's: the graph's node count) or is ``-1``; see :mod:`gpse_dgl.encode.large_graph`.
    ``seed`` also seeds the neighbour sampling (draw ``k`` with ``sample_seed(seed, k)``).
    ``batch_size`` is the number of seed nodes per mini-batch (default: all in one, the cheapest on a
    CPU; the paper used 1,024 on a GPU); ``nodes`` restricts the encoding to these nodes (rows of the
    result follow ``nodes``). Other parameters as in :func:`encode`.

    Examples
    --------
    >>> import dgl
    >>> from gpse_dgl.nn.gpse import GPSE
    >>> model = GPSE(dim_hidden=8, num_layers=3)
    >>> encode_sampled(model, dgl.rand_graph(300, 1500), fanouts=(10, 5), batch_size=128).shape
    torch.Size([300, 8])
    """
    with _large_graph_inference(model, g, x, seed, samples, device, undirected, precision) as (
            encoder, prepared, draws):
        return _average(
            sampled_forward(encoder, prepared, xk, fanouts=fanouts, batch_size=batch_size,
                            seed=None if seed is None else sample_seed(seed, k), nodes=nodes,
                            progress=progress).cpu()
            for k, xk in enumerate(draws))


def layer_by_layer(g: dgl.DGLGraph, dim: int, device, max_forward_bytes: int) -> bool:
    """Whether one graph of a dataset is too large for a plain forward and is encoded layer by layer
    (:func:`encode_large`): what :func:`encode_dataset` and its sharded form decide alike. ``g`` counts as one
    graph (one virtual node): DGL's ``batch_size`` would take as long again as the rest of the check."""
    return forward_bytes(g, dim, device, num_graphs=1) > max_forward_bytes


def _batches(graphs: list, batch_size: int, device, dim: int, max_forward_bytes: int):
    """Consecutive groups of at most ``batch_size`` graphs; a graph too large for a plain forward alone."""
    group: list = []
    for index, g in enumerate(graphs):
        if layer_by_layer(g, dim, device, max_forward_bytes):
            if group:
                yield group
                group = []
            yield [index]
            continue
        group.append(index)
        if len(group) == batch_size:
            yield group
            group = []
    if group:
        yield group


def encode_dataset(model, graphs: Sequence[dgl.DGLGraph], batch_size: int = DEFAULT_BATCH_SIZE,
                   seed: int | None = 0, samples: int = 1, progress: bool = True, device=None, undirected: bool = True,
                   store: str | None = None, sampled: bool = False, fanouts: Sequence[int] | None = None,
                   sample_batch_size: int | None = None, max_forward_bytes: int = MAX_FORWARD_BYTES,
                   chunk_edges: int = DEFAULT_CHUNK_EDGES, precision: Precision | str = "fp32") -> list:
    """GPSE encodings of every graph of a dataset, batched.

    Parameters
    ----------
    model : GPSE or GPSEForPretraining
        A pretrained encoder.
    graphs : sequence of DGLGraph
        The graphs (a node-level dataset has one), without virtual nodes.
    batch_size : int
        Graphs per forward pass. Does not change the result.
    seed, samples, device, undirected, max_forward_bytes, precision
        As in :func:`encode`.
    progress : bool
        Show a progress bar over graphs (and over layers for a large graph).
    store : str, optional
        Also write each encoding to ``graphs[i].ndata[store]`` (e.g. ``"gpse"``).
    sampled : bool
        Encode each graph with :func:`encode_sampled` (meant for large single graphs) instead of exactly.
    fanouts : sequence of int, optional
        Fan-outs for ``sampled`` (default ``(30, 20, 10, 5)``).
    sample_batch_size : int, optional
        Seed nodes per mini-batch for ``sampled`` (default: all nodes of a graph in one).
    chunk_edges : int
        Memory bound of layer-wise inference for large graphs (see :func:`encode_large`).

    Returns
    -------
    list of Tensor
        ``(n_i, model.dim_hidden)`` float32 CPU tensors, in the order of ``graphs``.

    Examples
    --------
    >>> import dgl
    >>> from gpse_dgl.nn.gpse import GPSE
    >>> model = GPSE(dim_hidden=8, num_layers=2)
    >>> graphs = [dgl.graph(([0, 1], [1, 0])), dgl.graph(([0, 1, 2], [1, 2, 0]))]
    >>> [e.shape[0] for e in encode_dataset(model, graphs, store="gpse", progress=False)]
    [2, 3]
    >>> graphs[1].ndata["gpse"].shape
    torch.Size([3, 8])
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    graphs = list(graphs)
    device = target_device(model, device)
    precision = as_precision(precision, device)  # decided once (a bad name fails before any work), passed down
    dim = bare_encoder(model).dim_hidden
    out: list = [None] * len(graphs)
    bar = _bar(len(graphs), progress)
    try:
        if sampled:
            for i, g in enumerate(graphs):
                out[i] = encode_sampled(model, g, seed=seed, samples=samples, fanouts=fanouts or DEFAULT_FANOUTS,
                                        batch_size=sample_batch_size, device=device, undirected=undirected,
                                        progress=progress and len(graphs) == 1, precision=precision)
                _advance(bar, [g])
        else:
            for group in _batches(graphs, batch_size, device, dim, max_forward_bytes):
                members = [graphs[i] for i in group]
                if len(group) == 1 and layer_by_layer(members[0], dim, device, max_forward_bytes):
                    encodings = [encode_large(model, members[0], seed=seed, samples=samples, device=device,
                                              undirected=undirected, chunk_edges=chunk_edges, progress=progress,
                                              precision=precision)]
                else:
                    batch = dgl.batch(members)
                    if undirected and not is_simple_undirected(batch):  # one test for the whole batch
                        batch = dgl.batch([_prepare(g, undirected) for g in members])
                    joined = encode(model, batch, seed=seed, samples=samples, device=device, undirected=False,
                                    max_forward_bytes=max_forward_bytes, precision=precision)
                    encodings = joined.split([g.num_nodes() for g in members])
                for i, enc in zip(group, encodings):
                    out[i] = enc
                _advance(bar, members)
    finally:
        if bar is not None:
            bar.close()
    if store:
        for g, enc in zip(graphs, out):
            g.ndata[store] = enc
    return out


def _bar(total: int, enabled: bool):
    if not enabled:
        return None

    return progress_bar(total=total, desc="GPSE encoding", unit="graph")


def _advance(bar, members) -> None:
    if bar is None:
        return
    bar.update(len(members))
    nodes = bar.__dict__.setdefault("_gpse_nodes", 0) + sum(g.num_nodes() for g in members)
    bar.__dict__["_gpse_nodes"] = nodes
    elapsed = bar.format_dict.get("elapsed") or 0.0
    if elapsed > 0:
        bar.set_postfix_str(f"{nodes / elapsed:,.0f} nodes/s", refresh=False)
