"""GPSE inference on large graphs: exact layer-wise full-graph inference and neighbour-sampled inference.

Both take a :class:`~gpse_dgl.nn.gpse.GPSE` encoder in eval mode and a (batched) graph *without* virtual
nodes; the virtual node of each member graph (``docs/PSE.md``, "Model") is added here as node
``N + b`` joined to every node of member ``b`` in both directions. They run the encoder's own stages
(:meth:`~gpse_dgl.nn.gpse.GPSE.input_stage`, :meth:`~gpse_dgl.nn.gpse.GPSE.residual_update`,
:meth:`~gpse_dgl.nn.gpse.GPSE.output_stage`) and the convolution's
:meth:`~gpse_dgl.nn.gated_conv.ResGatedConv.source_projections` /
:meth:`~gpse_dgl.nn.gated_conv.ResGatedConv.destination_projections` with
:func:`~gpse_dgl.nn.ops.gated_sum` (layer-wise on the CPU: the same sum by
:func:`~gpse_dgl.kernels.packed_gated_sum`); only the loop over nodes is theirs.

Exact layer-wise inference (:func:`layerwise_forward`)
    Layer ``l`` is computed for every node before layer ``l + 1`` starts, so only the current state
    ``h`` (``N x d``), the sources' query and value (``2 x N x d``) and the destinations of one group of
    rows live at a time, never the 20 layers of activations a plain forward keeps for autograd. On the
    CPU kernel's path the sources are also packed once per layer into a slab of the same size
    (:func:`~gpse_dgl.kernels.pack_sources`) and each group of destinations (up to 1 GiB of their
    buffers) is summed from it block of columns by block (:func:`~gpse_dgl.kernels.packed_gated_sum`):
    for ogbn-arxiv (169,343 nodes, d = 512, float32) about 2.4 GB in all; where that would not fit in the
    memory available, groups of 32,768 rows. Where even those would not fit, and on other devices, the
    destinations are taken in chunks of at most ``chunk_edges`` in-edges, whose gates take
    ``chunk_edges x d`` floats; a node whose in-degree exceeds the chunk budget (the virtual node has
    in-degree N) has its in-edges aggregated in several pieces (the CPU kernel then computes the sources'
    gate factors once per layer, into a new ``N x d`` buffer). The result equals the module's full forward
    up to float rounding (tests: 1e-5).

Neighbour-sampled inference (:func:`sampled_forward`)
    DGL's :class:`~dgl.dataloading.MultiLayerNeighborSampler` draws, for each batch of seed nodes, up to
    ``fanouts[k]`` in-neighbours per node at hop ``k`` (hop 1 = the last layer; the paper's
    ogbn-proteins setting is 30, 20, 10, then 5 for the remaining layers). The virtual node is an
    ordinary node of the sampled graph, as in the reference implementation's NeighborLoader run: a node
    sees it only if it is among its sampled neighbours, and the virtual node itself aggregates only its
    sampled in-neighbours instead of the whole graph. Because GPSE aggregates with a *sum*, sampled
    encodings are an approximation whose quality falls with the fraction of neighbours dropped; they are
    exact when every fan-out is at least the largest in-degree (the virtual node's: N) or ``-1``.
    Cost: with 20 layers the sampled computation graph of a mini-batch covers almost every node after
    two or three hops, so each mini-batch costs nearly a full-graph pass (with fewer edges). On an
    arXiv-size graph the paper's 1,024 seeds per batch (chosen for GPU memory) mean ~165 such passes,
    hours on a CPU. The default is therefore one mini-batch holding every seed: one pass over graphs
    with at most ``fanouts[k]`` in-edges per node at hop ``k`` (one sampled neighbourhood per layer,
    shared by all seeds). That is cheaper than exact inference on dense graphs such as ogbn-proteins
    (~600 edges per node); give a ``batch_size`` to bound memory instead.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl.encode.large_graph import layerwise_forward
>>> from gpse_dgl.nn.gpse import GPSE
>>> encoder = GPSE(dim_in=4, dim_hidden=8, num_layers=3).eval()
>>> g = dgl.graph(([0, 1, 1, 2], [1, 0, 2, 1]))
>>> layerwise_forward(encoder, g, torch.randn(3, 4), chunk_edges=2).shape
torch.Size([3, 8])
"""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .. import _env  # noqa: F401
import dgl

from .. import kernels
from ..nn.gated_conv import product_dtype
from ..nn.gpse import GPSE
from ..nn.ops import gated_sum
from ..utils.distributed import current, shard_range
from ..utils import memory
from ..utils.precision import to_accumulation
from ..utils.progress import progress as progress_bar
from .chunk_plan import plan_destinations

__all__ = ["DEFAULT_CHUNK_EDGES", "DEFAULT_FANOUTS", "virtual_node_edges", "layerwise_forward",
           "expand_fanouts", "sampled_forward"]

# Most in-edges per destination chunk. On the CPU the gates are computed in cache-sized pieces anyway
# (gpse_dgl.nn.ops.gated_sum); elsewhere one chunk's gates are chunk_edges x d floats (256 MiB at d = 512).
DEFAULT_CHUNK_EDGES = 1 << 17
# Destination nodes per chunk bound the key/skip/aggregate temporaries (3 x nodes x d floats).
MAX_CHUNK_NODES = 1 << 15
DEFAULT_FANOUTS = (30, 20, 10, 5)
# Packed sources: a group's destination buffers may take this many bytes (each group reads every block of the
# slab from memory once, so fewer groups move less), and the encode's buffers this share of the memory available.
PACKED_GROUP_BYTES = 1 << 30
MEMORY_FRACTION = 0.8


def virtual_node_edges(g: dgl.DGLGraph, virtual: bool = True) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Edges of ``g`` plus one virtual node per member graph, as ``(src, dst, num_nodes)``.

    Member ``b``'s virtual node is node ``g.num_nodes() + b``; the added edges are ``i -> vn`` then
    ``vn -> i`` for every node ``i`` of the member (the layout of
    :func:`gpse_dgl.nn.virtual_node.add_virtual_nodes` and PyG's ``VirtualNode``). With
    ``virtual=False`` the edges of ``g`` are returned as they are.

    Examples
    --------
    >>> import dgl
    >>> src, dst, n = virtual_node_edges(dgl.graph(([0], [1])))
    >>> n, src.tolist(), dst.tolist()
    (3, [0, 0, 1, 2, 2], [1, 2, 2, 0, 1])
    """
    n = g.num_nodes()
    src, dst = (t.to(torch.int64) for t in g.edges())
    if not virtual:
        return src, dst, n
    counts = g.batch_num_nodes().to(torch.int64)
    nodes = torch.arange(n, dtype=torch.int64)
    vn = n + torch.repeat_interleave(torch.arange(len(counts), dtype=torch.int64), counts)
    return torch.cat([src, nodes, vn]), torch.cat([dst, vn, nodes]), n + len(counts)


@dataclass
class _Chunk:
    start: int            # first destination node
    stop: int             # one past the last destination node
    blocks: list          # DGL blocks (all sources -> destinations start..stop-1), one per edge piece


def _plan_chunks(src: torch.Tensor, dst: torch.Tensor, num_nodes: int, chunk_edges: int,
                 blocks: bool = True) -> tuple[list, tuple]:
    """Destination chunks of at most ``chunk_edges`` in-edges and :data:`MAX_CHUNK_NODES` nodes
    (:func:`~gpse_dgl.encode.chunk_plan.plan_destinations`); with ``blocks`` each chunk's DGL blocks, one per edge
    piece, built once and reused by every layer. Returns the chunks and the edges by destination,
    ``(indptr, sources)``.
    """
    plan = plan_destinations(src, dst, num_nodes, chunk_edges, MAX_CHUNK_NODES)
    src_sorted, dst_sorted = plan.sources, plan.destinations
    chunks = [_Chunk(start, stop, [
        dgl.create_block((src_sorted[piece], dst_sorted[piece] - start), num_src_nodes=num_nodes,
                         num_dst_nodes=stop - start) for piece in pieces] if blocks else [])
              for start, stop, pieces in plan.ranges]
    return chunks, (torch.from_numpy(plan.indptr), src_sorted.contiguous())


def _progress(iterable, enabled: bool, **kwargs):
    return progress_bar(iterable, enabled=enabled, **kwargs)


@torch.no_grad()
def layerwise_forward(encoder: GPSE, g: dgl.DGLGraph, x: torch.Tensor,
                      chunk_edges: int = DEFAULT_CHUNK_EDGES, progress: bool = False,
                      shard: bool = False) -> torch.Tensor:
    """Exact GPSE encodings of every node of ``g``, one layer at a time over destination-node chunks.

    Parameters
    ----------
    encoder : GPSE
        The encoder in eval mode, on the device to compute on.
    g : DGLGraph
        Graph or batched graph without virtual nodes (kept on the CPU).
    x : Tensor
        ``(g.num_nodes(), encoder.dim_in)`` random input features, on the compute device.
    chunk_edges : int
        Most in-edges per destination chunk (on non-CPU devices also the most gates held at once,
        ``chunk_edges x d`` floats).
    progress : bool
        Show a progress bar over layers.
    shard : bool
        Under torchrun (a joined process group), every rank updates a contiguous range of the chunks
        (about ``1 / world_size`` of the edges) and the ranks exchange their rows of ``h`` after every
        layer (:func:`_exchange_rows`); each chunk is computed as in one process, so the result is the
        same. Every rank calls this with the same graph and features and gets the whole result.

    Returns
    -------
    Tensor of shape ``(g.num_nodes(), encoder.dim_hidden)`` on ``x``'s device.
    """
    if chunk_edges < 1:
        raise ValueError(f"chunk_edges must be >= 1, got {chunk_edges}")
    _check_eval(encoder)
    n = g.num_nodes()
    src, dst, total = virtual_node_edges(g, encoder.virtual_node)
    group_rows = _packed_group_rows(x, total, encoder.dim_hidden)
    packed = group_rows is not None
    chunks, (indptr, index) = _plan_chunks(src, dst, total, chunk_edges, blocks=not packed)
    del src, dst
    mine = _my_chunks(chunks) if shard else chunks
    x_all = torch.cat([x, x.new_zeros(total - n, x.shape[1])])  # virtual nodes have zero input
    h = memory.empty((total, encoder.dim_hidden), dtype=x.dtype, device=x.device)
    for chunk in chunks:
        h[chunk.start:chunk.stop] = encoder.input_stage(x_all[chunk.start:chunk.stop])
    del x_all
    groups = _row_groups(mine, group_rows or MAX_CHUNK_NODES)
    edges = [_group_edges(indptr, index, group) for group in groups] if packed else [None] * len(groups)
    del indptr, index
    buffers = _LayerBuffers(h, max((group[-1].stop - group[0].start for group in groups), default=0), packed)
    layers = _progress(list(enumerate(encoder.convs)), progress, desc="GPSE layers", unit="layer", leave=False)
    for layer, conv in layers:
        # one cast of the states for the layer's four products (under autocast); a group's own rows
        # are read before its residual update writes them, so the cast stays valid for its projections
        h_in = buffers.product_input(h)
        query, value = conv.source_projections(h_in, out=buffers.sources)
        sources = kernels.pack_sources(query, value, out=buffers.source_slab) if packed else None
        for group, group_edges in zip(groups, edges):
            start, stop = group[0].start, group[-1].stop
            key, skip = conv.destination_projections(h_in[start:stop], out=buffers.destinations[:stop - start])
            out = buffers.accumulator(skip)  # float32 sum when the products ran in bf16/fp16 (autocast)
            if packed:
                kernels.packed_gated_sum(*group_edges, key, sources, out)  # added in place
            else:
                for chunk in group:
                    rows = slice(chunk.start - start, chunk.stop - start)
                    for block in chunk.blocks:
                        gated_sum(block, key[rows], query, value, out=out[rows])  # added in place
            # Sources of later groups read query/value computed above, so h can be updated in place.
            encoder.residual_update(layer, h[start:stop], _with_bias(out, conv))
        if mine is not chunks:
            _exchange_rows(h, chunks)
    return encoder.output_stage(h[:n])


def _packed_group_rows(x: torch.Tensor, rows: int, dim: int) -> int | None:
    """Destination rows per group with packed sources: up to :data:`PACKED_GROUP_BYTES` of their buffers, else
    :data:`MAX_CHUNK_NODES`, whichever fits in :data:`MEMORY_FRACTION` of the memory available with the encode's
    other buffers; None (the row kernel's chunks) where neither does, or off the CPU kernel's path."""
    dtype = product_dtype(x)
    if not kernels.packs_sources(x.device, dtype):
        return None
    low = dtype != x.dtype
    slab = math.prod(kernels.packed_shape(rows, dim, dtype)) * dtype.itemsize
    # h, the sources' [query | value], the slab, and under autocast the cast of h
    fixed = rows * dim * (x.dtype.itemsize + 2 * dtype.itemsize + (dtype.itemsize if low else 0)) + slab
    row_bytes = dim * (2 * dtype.itemsize + (x.dtype.itemsize if low else 0))  # [key | skip], the float32 sums
    free = memory.available_bytes()
    for group_rows in (max(MAX_CHUNK_NODES, PACKED_GROUP_BYTES // row_bytes), MAX_CHUNK_NODES):
        if free is None or fixed + min(group_rows, rows) * row_bytes <= MEMORY_FRACTION * free:
            return group_rows
    return None


def _group_edges(indptr: torch.Tensor, index: torch.Tensor, group: list) -> tuple[torch.Tensor, torch.Tensor]:
    """The in-edges of a group's destinations by destination, ``(indptr, sources)`` numbered from its first row."""
    start, stop = group[0].start, group[-1].stop
    lo, hi = int(indptr[start]), int(indptr[stop])
    return indptr[start:stop + 1] - lo, index[lo:hi]


def _row_groups(chunks: list, max_rows: int = MAX_CHUNK_NODES) -> list:
    """Consecutive chunks grouped up to ``max_rows`` destination rows. The destinations' products run once
    per group and the aggregation once per chunk: an edge budget of 131,072 gives chunks of ~9,000 rows at
    arXiv's degree, and a product over 32,768 rows runs about a quarter faster than over 8,192."""
    groups, rows = [], 0
    for chunk in chunks:
        size = chunk.stop - chunk.start
        if not groups or rows + size > max_rows:
            groups.append([])
            rows = 0
        groups[-1].append(chunk)
        rows += size
    return groups


class _LayerBuffers:
    """The buffers every layer of :func:`layerwise_forward` writes, allocated once (on huge pages where
    the OS offers them: the gated sum reads source rows in random order, :mod:`gpse_dgl.utils.memory`)
    instead of once per layer and chunk, where each fresh buffer of hundreds of MB would be mapped
    and zeroed page by page again.

    ``sources``: every node's ``[query | value]`` (``N x 2d``, product dtype); ``source_slab``: the same packed
    with the queries' gate factors (:func:`gpse_dgl.kernels.pack_sources`); ``destinations``: one group's
    ``[key | skip]``; under autocast also the states cast for the products and a float32 sum of a group.
    """

    def __init__(self, h: torch.Tensor, group_rows: int, packed: bool):
        d, dtype = h.shape[1], product_dtype(h)
        self.sources = memory.empty((h.shape[0], 2 * d), dtype=dtype, device=h.device)
        self.source_slab = memory.empty(kernels.packed_shape(h.shape[0], d, dtype), dtype=dtype) if packed else None
        self.destinations = memory.empty((group_rows, 2 * d), dtype=dtype, device=h.device)
        low = dtype != h.dtype
        self._cast = memory.empty(h.shape, dtype=dtype, device=h.device) if low else None
        self._sums = memory.empty((group_rows, d), dtype=h.dtype, device=h.device) if low else None

    def product_input(self, h: torch.Tensor) -> torch.Tensor:
        """``h`` in the product dtype (itself in float32)."""
        return h if self._cast is None else self._cast.copy_(h)

    def accumulator(self, skip: torch.Tensor) -> torch.Tensor:
        """The float32 sum a group's messages are added to, starting from its skip term."""
        return skip if self._sums is None else self._sums[:skip.shape[0]].copy_(skip)


def _check_eval(encoder) -> None:
    if encoder.training:
        raise ValueError("layer-wise and sampled inference need the encoder in eval mode (call .eval())")


def _with_bias(out: torch.Tensor, conv) -> torch.Tensor:
    """The convolution's output bias added after the aggregation, as :class:`ResGatedConv` does."""
    return out if conv.bias is None else out.add_(conv.bias)


def _rank_node_ranges(chunks: list) -> list:
    """``[start, stop)`` node rows each rank updates: contiguous runs of chunks, equal in number."""
    ctx = current()
    ranges = []
    for rank in range(ctx.world_size):
        first, last = shard_range(len(chunks), rank, ctx.world_size)
        ranges.append((chunks[first].start, chunks[last - 1].stop) if last > first else (0, 0))
    return ranges


def _my_chunks(chunks: list) -> list:
    ctx = current()
    first, last = shard_range(len(chunks), ctx.rank, ctx.world_size)
    return chunks[first:last]


def _exchange_rows(h: torch.Tensor, chunks: list) -> None:
    """Give every rank the rows of ``h`` the other ranks updated (one all-gather per layer)."""
    ranges = _rank_node_ranges(chunks)
    width = max(stop - start for start, stop in ranges)
    pieces = [h.new_empty(width, h.shape[1]) for _ in ranges]
    rank_start, rank_stop = ranges[dist.get_rank()]
    local = h.new_zeros(width, h.shape[1])
    local[:rank_stop - rank_start] = h[rank_start:rank_stop]
    dist.all_gather(pieces, local)
    for (start, stop), piece in zip(ranges, pieces):
        h[start:stop] = piece[:stop - start]


def expand_fanouts(fanouts, num_layers: int) -> list:
    """Per-hop fan-outs for ``num_layers`` layers, nearest hop first; the last value repeats.

    Examples
    --------
    >>> expand_fanouts((30, 20, 10, 5), 6)
    [30, 20, 10, 5, 5, 5]
    """
    fanouts = [int(f) for f in fanouts]
    if not fanouts or any(f == 0 or f < -1 for f in fanouts):
        raise ValueError(f"fan-outs must be positive integers or -1 (all neighbours), got {fanouts}")
    return (fanouts + [fanouts[-1]] * num_layers)[:num_layers]


@torch.no_grad()
def sampled_forward(encoder: GPSE, g: dgl.DGLGraph, x: torch.Tensor,
                    fanouts=DEFAULT_FANOUTS, batch_size: int | None = None, seed: int | None = 0,
                    nodes: torch.Tensor | None = None, progress: bool = False) -> torch.Tensor:
    """Approximate GPSE encodings from neighbour-sampled computation graphs (see the module docstring).

    Parameters
    ----------
    encoder : GPSE
        The encoder in eval mode, on the device to compute on.
    g : DGLGraph
        Graph or batched graph without virtual nodes (kept on the CPU).
    x : Tensor
        ``(g.num_nodes(), encoder.dim_in)`` random input features, on the compute device.
    fanouts : sequence of int
        In-neighbours sampled per node, nearest hop (last layer) first, last value repeated for the
        remaining layers; ``-1`` takes all neighbours.
    batch_size : int, optional
        Seed nodes per sampled mini-batch; default all of them in one (see the module docstring).
    seed : int or None
        Seeds DGL's sampling RNG (``dgl.seed``, process-wide) for reproducible neighbourhoods.
    nodes : LongTensor, optional
        Encode only these (distinct) nodes (default: all); only their sampled neighbourhoods are computed.
    progress : bool
        Show a progress bar over seed nodes.

    Returns
    -------
    Tensor of shape ``(len(nodes), encoder.dim_hidden)`` (default ``(g.num_nodes(), encoder.dim_hidden)``)
    on ``x``'s device, rows in the order of ``nodes``.
    """
    _check_eval(encoder)
    n = g.num_nodes()
    nodes = torch.arange(n) if nodes is None else torch.as_tensor(nodes, dtype=torch.int64).cpu()
    if nodes.numel() and (int(nodes.min()) < 0 or int(nodes.max()) >= n):
        raise ValueError(f"nodes must be in [0, {n})")
    if torch.unique(nodes).numel() != nodes.numel():
        raise ValueError("nodes must not repeat")
    batch_size = max(1, len(nodes)) if batch_size is None else int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    src, dst, total = virtual_node_edges(g, encoder.virtual_node)
    graph = dgl.graph((src, dst), num_nodes=total)
    del src, dst
    hops = expand_fanouts(fanouts, encoder.num_layers)
    # DGL lists fan-outs from the input layer to the output layer: the reverse of hop order.
    sampler = dgl.dataloading.MultiLayerNeighborSampler(list(reversed(hops)))
    if seed is not None:
        dgl.seed(int(seed))
    loader = dgl.dataloading.DataLoader(graph, nodes, sampler, batch_size=batch_size, shuffle=False,
                                        drop_last=False)
    with _single_threaded_sampling(seed is not None):
        return _sampled_batches(encoder, loader, x, total, n, nodes, progress)


@contextlib.contextmanager
def _single_threaded_sampling(enabled: bool):
    """Run DGL's C++ sampler on one thread while ``enabled``.

    DGL samples the seed nodes of a batch in parallel with per-thread random streams, so with several
    OpenMP threads the neighbourhoods drawn depend on thread scheduling even after ``dgl.seed``; one
    thread makes a seeded run reproducible.
    """
    if not enabled:
        yield
        return
    previous = dgl.utils.get_num_threads()
    dgl.utils.set_num_threads(1)
    try:
        yield
    finally:
        dgl.utils.set_num_threads(previous)


def _sampled_batches(encoder, loader, x, total, n, nodes, progress):
    x_all = torch.cat([x, x.new_zeros(total - n, x.shape[1])])
    out = x.new_empty(len(nodes), encoder.dim_hidden)
    bar = _progress(None, progress, total=len(nodes), desc="GPSE sampled", unit="node", leave=False)
    start = 0
    with warnings.catch_warnings():
        # DGL suggests CPU-affinity tuning for worker processes; we sample in-process.
        warnings.filterwarnings("ignore", message=".*CPU affinity.*")
        for input_nodes, output_nodes, blocks in loader:
            h = encoder.input_stage(x_all[input_nodes.to(x.device)])
            for layer, (block, conv) in enumerate(zip(blocks, encoder.convs)):
                num_dst = block.num_dst_nodes()
                query, value = conv.source_projections(h)
                key, skip = conv.destination_projections(h[:num_dst])
                conv_out = gated_sum(block, key, query, value, out=to_accumulation(skip))
                h = encoder.residual_update(layer, h[:num_dst], _with_bias(conv_out, conv))
            # shuffle=False: mini-batches are consecutive slices of ``nodes``
            out[start:start + len(output_nodes)] = encoder.output_stage(h)
            start += len(output_nodes)
            if progress:
                bar.update(len(output_nodes))
    if progress:
        bar.close()
    return out
