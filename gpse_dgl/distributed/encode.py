"""Exact layer-wise GPSE encoding of one graph on ``dgl.distributed`` (run inside a joined trainer).

The arithmetic is :func:`gpse_dgl.encode.large_graph.layerwise_forward`'s, shared out by partition:
trainer ``r`` owns the destination nodes ``node_split`` gives it (its partition's nodes; several trainers
of one partition split them) and keeps their state ``h`` privately. Layer ``l``:

1. every trainer projects its own rows of ``h`` as message sources and writes the query and value rows
   into two ``DistTensor``s (``N x d`` each, every server holding its partition's rows), and adds its
   nodes' messages to the virtual node (``sigmoid(key_vn + query_u) * value_u``);
2. one ``all_reduce`` sums those partial sums: the virtual node, joined to every node, is not a graph
   node here but one state vector replicated on every trainer (it is also the barrier after which every
   query/value row of the layer is in place);
3. per chunk of its destination nodes (at most ``chunk_edges`` in-edges) the trainer pulls the query and
   value rows of the chunk's sources through the servers (local rows from shared memory, remote rows by
   RPC), adds the virtual node's message, and updates its rows of ``h``
   (:meth:`~gpse_dgl.nn.gated_conv.ResGatedConv.destination_projections`,
   :func:`~gpse_dgl.nn.ops.gated_sum`, :meth:`~gpse_dgl.nn.gpse.GPSE.residual_update`);
4. a barrier, so that no trainer overwrites query/value rows another still reads.

A trainer's in-edges come from its partition's files (DGL's partitions hold every in-edge of the nodes
they own). Memory per trainer: its nodes' ``h`` (``n_r x d``), the graph structure of its partition, and
per chunk the pulled rows (``2 x sources x d``); the servers hold ``2 x n_p x d`` of the query/value
tensors. The random input features are those of one process (:func:`node_features`), so the result
equals :func:`~gpse_dgl.encode.inference.encode_large` with the same seed up to float summation order.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from .. import _env  # noqa: F401
import dgl

from ..encode.chunk_plan import plan_destinations
from ..encode.graphs import sample_seed
from ..nn.gpse import GPSE
from ..nn.ops import gated_sum
from ..nn.random_features import graph_seed
from ..utils.precision import to_accumulation
from .partition import orig_ids
from .runtime import Trainer, memory_status, peak_rss_bytes, write_stats
from .shards import write_manifest, write_shard

__all__ = ["DEFAULT_DIST_CHUNK_EDGES", "node_features", "plan_chunks", "encode_distributed", "FEATURE_ROWS"]

#: Most in-edges per destination chunk: the pulled rows of a chunk are at most 2 x this x d floats
#: (64 MiB at d = 512).
DEFAULT_DIST_CHUNK_EDGES = 1 << 14
#: Rows of random features drawn at a time; a multiple of 16, so the draws in blocks are the one draw
#: of a single process bit for bit (torch fills normal values 16 at a time; tested).
FEATURE_ROWS = 1 << 14
#: Pulled source lists are padded to a multiple of this many rows (see plan_chunks).
PAD_ROWS = 1024
#: Rows projected at a time as message sources.
SOURCE_ROWS = 1 << 14


def node_features(num_nodes: int, dim: int, seed: int, key: int, wanted: torch.Tensor) -> torch.Tensor:
    """Rows ``wanted`` (original node ids) of the ``(num_nodes, dim)`` standard-normal features one
    process draws for the graph with structural ``key`` under ``seed``
    (:func:`~gpse_dgl.nn.random_features.random_node_features`), without holding all of them.

    The whole stream is drawn in blocks of :data:`FEATURE_ROWS` rows (the last block takes the remainder).
    """
    wanted = torch.as_tensor(wanted, dtype=torch.int64)
    order = torch.argsort(wanted)
    ids = wanted[order]
    out = torch.empty(len(wanted), dim)
    gen = torch.Generator().manual_seed(graph_seed(seed, int(key)))
    bounds = list(range(0, num_nodes, FEATURE_ROWS)) + [num_nodes]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] < 16:
        bounds.pop(-2)  # a block below 16 values is drawn differently: fold it into the one before
    for a, b in zip(bounds, bounds[1:]):
        block = torch.randn(b - a, dim, generator=gen)
        lo, hi = (int(i) for i in torch.searchsorted(ids, torch.tensor([a, b])))
        out[order[lo:hi]] = block[ids[lo:hi] - a]
    return out


@dataclass
class _Piece:
    sources: torch.Tensor   # global (DGL new) ids of the piece's distinct sources
    block: object           # DGL block: the piece's sources -> the chunk's nodes


@dataclass
class _Chunk:
    start: int              # first row (position among the trainer's nodes)
    stop: int
    pieces: list


def plan_chunks(src: torch.Tensor, dst_pos: torch.Tensor, num_rows: int, chunk_edges: int,
                pad_id: int | None = None) -> list:
    """Destination chunks over the trainer's rows ``0 .. num_rows - 1`` with their in-edges
    ``src -> dst_pos`` (global source ids, destination rows); each chunk's edges in pieces of at most
    ``chunk_edges`` (the virtual node's message is added apart: it has one source for every row). With
    ``pad_id`` (a node of the trainer's own partition: a local row), each piece's source list is padded
    with it to a multiple of :data:`PAD_ROWS`."""
    plan = plan_destinations(src, dst_pos, num_rows, chunk_edges, max_nodes=chunk_edges)
    src, dst_pos = plan.sources, plan.destinations
    chunks = []
    for start, stop, cuts in plan.ranges:
        pieces = []
        for piece in cuts:
            sources, index = torch.unique(src[piece], return_inverse=True)
            # Pulled row buffers then come in a few sizes only (freed ones fit the next pull); the
            # padding rows have no edges and are local (copied from shared memory, not sent).
            padded = -(-len(sources) // PAD_ROWS) * PAD_ROWS
            if pad_id is not None and padded > len(sources):
                sources = torch.cat([sources, torch.full((padded - len(sources),), int(pad_id), dtype=torch.int64)])
            block = dgl.create_block((index, dst_pos[piece] - start), num_src_nodes=len(sources),
                                     num_dst_nodes=stop - start)
            pieces.append(_Piece(sources, block))
        chunks.append(_Chunk(start, stop, pieces))
    return chunks


def _my_nodes(trainer: Trainer) -> torch.Tensor:
    """Global ids of the nodes this trainer updates (its ``node_split`` share of its partition), sorted."""
    mask = torch.zeros(trainer.graph.num_nodes(), dtype=torch.bool)
    mask[torch.as_tensor(trainer.partition_book.partid2nids(trainer.part), dtype=torch.int64)] = True
    mine = dgl.distributed.node_split(mask, trainer.partition_book, force_even=False)
    return torch.sort(torch.as_tensor(mine, dtype=torch.int64)).values


def _part_range(trainer: Trainer) -> tuple:
    inner = trainer.local_graph.ndata["inner_node"].bool()
    ids = trainer.local_graph.ndata[dgl.NID][inner]
    return int(ids.min()), int(ids.max()) + 1


def _in_edges(trainer: Trainer, mine: torch.Tensor) -> tuple:
    """In-edges of the trainer's nodes from its partition: ``(global source ids, destination rows)``."""
    local = trainer.local_graph
    nid = local.ndata[dgl.NID].to(torch.int64)
    perm = torch.argsort(nid)
    local_ids = perm[torch.searchsorted(nid[perm], mine)]
    if not torch.equal(nid[local_ids], mine):
        raise RuntimeError("a node of this trainer is missing from its partition's files")
    src, dst = local.in_edges(local_ids, form="uv")
    row_of_local = torch.full((local.num_nodes(),), -1, dtype=torch.int64)
    row_of_local[local_ids] = torch.arange(len(mine))
    return nid[src.to(torch.int64)], row_of_local[dst.to(torch.int64)]


@torch.no_grad()
def encode_distributed(trainer: Trainer, encoder: GPSE, out_dir, seed: int = 0,
                       chunk_edges: int = DEFAULT_DIST_CHUNK_EDGES, log=print) -> dict:
    """Encode the trainer's nodes, write its shard to ``out_dir``; returns this trainer's statistics.

    Every trainer calls this with the same encoder and seed. Rank 0 also writes ``manifest.json``
    (read the result with :func:`gpse_dgl.distributed.shards.read_encodings`).
    """
    encoder.eval()
    times, memory = {}, {"start": memory_status()}
    t0 = time.perf_counter()
    info = trainer.info
    d, virtual = encoder.dim_hidden, encoder.virtual_node
    mine = _my_nodes(trainer)
    src, rows = _in_edges(trainer, mine)
    part_start = _part_range(trainer)[0]
    trainer.local_graph = None  # the chunks' blocks hold what is needed of it
    chunks = plan_chunks(src, rows, len(mine), chunk_edges, pad_id=int(mine[0]) if len(mine) else None)
    edges = len(src)
    del src, rows
    my_orig = orig_ids(info["directory"], trainer.part)[mine - part_start]
    times["plan"] = time.perf_counter() - t0
    memory["planned"] = memory_status()

    t = time.perf_counter()
    x = node_features(info["num_nodes"], encoder.dim_in, sample_seed(seed, 0), info["feature_key"], my_orig)
    h = torch.empty(len(mine), d)
    for a in range(0, len(mine), SOURCE_ROWS):
        h[a:a + SOURCE_ROWS] = encoder.input_stage(x[a:a + SOURCE_ROWS])
    del x
    h_vn = encoder.input_stage(torch.zeros(1, encoder.dim_in))
    times["input"] = time.perf_counter() - t

    policy = trainer.graph.get_node_partition_policy("_N")
    query = dgl.distributed.DistTensor((info["num_nodes"], d), torch.float32, "gpse_query",
                                       part_policy=policy, persistent=True)
    value = dgl.distributed.DistTensor((info["num_nodes"], d), torch.float32, "gpse_value",
                                       part_policy=policy, persistent=True)
    pulled = 0
    t = time.perf_counter()
    for layer, conv in enumerate(encoder.convs):
        lt = time.perf_counter()
        vn_sum = torch.zeros(1, d)
        if virtual:
            key_vn, skip_vn = conv.destination_projections(h_vn)
            query_vn, value_vn = conv.source_projections(h_vn)
        for a in range(0, len(mine), SOURCE_ROWS):
            q, v = conv.source_projections(h[a:a + SOURCE_ROWS])
            ids = mine[a:a + SOURCE_ROWS]
            query[ids] = q
            value[ids] = v
            if virtual:
                vn_sum += torch.sigmoid(q + key_vn).mul_(v).sum(0, keepdim=True)
        dist.all_reduce(vn_sum)  # also: every trainer's query/value rows of this layer are written
        for chunk in chunks:
            h_dst = h[chunk.start:chunk.stop]
            key, skip = conv.destination_projections(h_dst)
            out = to_accumulation(skip)
            for piece in chunk.pieces:
                pulled += len(piece.sources)
                out = out.add_(gated_sum(piece.block, key, query[piece.sources], value[piece.sources]))
            if virtual:  # the virtual node's message to every node of the chunk
                out.add_(torch.sigmoid(key.add_(query_vn)).mul_(value_vn))
            encoder.residual_update(layer, h_dst, _with_bias(out, conv))
        if virtual:
            encoder.residual_update(layer, h_vn, _with_bias(to_accumulation(skip_vn).add_(vn_sum), conv))
        dist.barrier()  # nobody overwrites query/value rows while another trainer still pulls them
        if layer == 0:
            memory["first_layer"] = memory_status()
        log(f"layer {layer + 1}/{len(encoder.convs)}: {time.perf_counter() - lt:.2f} s")
    times["layers"] = time.perf_counter() - t
    encoder.output_stage(h)

    t = time.perf_counter()
    write_shard(out_dir, trainer.rank, my_orig, h)
    dist.barrier()
    if trainer.rank == 0:
        write_manifest(out_dir, info, trainer.world_size, d, seed)
    times["write"] = time.perf_counter() - t
    memory["end"] = memory_status()
    stats = {"role": "trainer", "rank": trainer.rank, "part": trainer.part, "nodes": len(mine), "in_edges": edges,
             "chunks": len(chunks), "rows_pulled_per_layer": pulled // max(1, len(encoder.convs)),
             "seconds": time.perf_counter() - t0, "phases": times, "peak_rss_bytes": peak_rss_bytes(),
             "memory": memory}
    write_stats(f"trainer{trainer.rank}", stats)
    return stats


def _with_bias(out: torch.Tensor, conv) -> torch.Tensor:
    return out if conv.bias is None else out.add_(conv.bias)
