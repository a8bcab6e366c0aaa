"""Encoding shared out among ``torchrun``'s processes, with the output of one process.

A graph's encoding depends only on the graph, the seed and the model (input features are seeded per
graph from its structure, :mod:`gpse_dgl.nn.random_features`), never on the other graphs of its
batch. So under ``torchrun``:

* **many graphs**: rank ``r`` encodes a contiguous range of the graphs holding about ``1 / N`` of the
  nodes, and rank 0 receives every range in order (:func:`encode_dataset_sharded` returns the
  encodings there, ``None`` elsewhere);
* **one large graph** (node-level datasets; one that one process encodes layer by layer): every rank
  takes part in exact layer-wise inference, each updating a contiguous range of destination nodes per
  layer (:func:`~gpse_dgl.encode.large_graph.layerwise_forward` with ``shard=True``); one small graph
  is encoded by rank 0 alone;
* **one graph with neighbour sampling** (``sampled=True``) is not sharded (a one-line error).

Without a joined process group this is :func:`~gpse_dgl.encode.inference.encode_dataset`.

Example (one process)
---------------------
>>> import dgl
>>> from gpse_dgl.nn.gpse import GPSE
>>> model = GPSE(dim_hidden=8, num_layers=2)
>>> graphs = [dgl.graph(([0, 1], [1, 0])), dgl.graph(([0, 1, 2], [1, 2, 0]))]
>>> [e.shape for e in encode_dataset_sharded(model, graphs, progress=False)]
[torch.Size([2, 8]), torch.Size([3, 8])]
>>> balanced_ranges([5, 1, 1, 1, 2], 2)
[(0, 1), (1, 5)]
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..utils.distributed import DistributedError, current
from ..utils.precision import Precision
from .inference import (DEFAULT_BATCH_SIZE, MAX_FORWARD_BYTES, bare_encoder, encode_dataset, encode_large,
                        layer_by_layer, target_device)
from .large_graph import DEFAULT_CHUNK_EDGES

__all__ = ["encode_dataset_sharded", "balanced_ranges"]


def balanced_ranges(sizes: Sequence[int], world_size: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` item ranges, one per rank, with about equal sums of ``sizes``."""
    cumulative = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    targets = cumulative[-1] * np.arange(world_size + 1) / world_size
    bounds = np.searchsorted(cumulative, targets, side="left")
    bounds[0], bounds[-1] = 0, len(sizes)
    bounds = np.maximum.accumulate(bounds)
    return [(int(bounds[r]), int(bounds[r + 1])) for r in range(world_size)]


def encode_dataset_sharded(model, graphs: Sequence, batch_size: int = DEFAULT_BATCH_SIZE, seed: int | None = 0,
                           samples: int = 1, progress: bool = True, device=None, undirected: bool = True,
                           store: str | None = None, sampled: bool = False, fanouts: Sequence[int] | None = None,
                           sample_batch_size: int | None = None, max_forward_bytes: int = MAX_FORWARD_BYTES,
                           chunk_edges: int = DEFAULT_CHUNK_EDGES,
                           precision: Precision | str = "fp32") -> list | None:
    """:func:`~gpse_dgl.encode.inference.encode_dataset` with the work shared among torchrun's ranks.

    Every rank passes the same ``graphs`` and options (those of ``encode_dataset``). Returns the
    encodings of all graphs on rank 0 (also stored in ``graphs[i].ndata[store]`` there) and ``None`` on
    the other ranks.
    """
    ctx = current()
    graphs = list(graphs)
    # what a graph's encoding depends on (the same on every rank), and how the work is cut up
    per_graph = {"seed": seed, "samples": samples, "device": device, "undirected": undirected,
                 "chunk_edges": chunk_edges, "precision": precision}
    batching = {"batch_size": batch_size, "sampled": sampled, "fanouts": fanouts,
                "sample_batch_size": sample_batch_size, "max_forward_bytes": max_forward_bytes}
    if not ctx.is_distributed:
        return encode_dataset(model, graphs, store=store, progress=progress, **per_graph, **batching)
    progress = progress and ctx.is_main
    if len(graphs) == 1 and sampled:
        raise DistributedError("encode --sampled on one graph is not sharded among torchrun's processes; "
                               "run it as one process (exact inference is sharded)")
    dim = bare_encoder(model).dim_hidden
    if len(graphs) == 1 and layer_by_layer(graphs[0], dim, target_device(model, device), max_forward_bytes):
        out = [encode_large(model, graphs[0], shard=True, progress=progress, **per_graph)]
    elif len(graphs) == 1:
        out = encode_dataset(model, graphs, progress=progress, **per_graph, **batching) if ctx.is_main else None
    else:
        ranges = balanced_ranges([g.num_nodes() for g in graphs], ctx.world_size)
        start, stop = ranges[ctx.rank]
        mine = (encode_dataset(model, graphs[start:stop], progress=progress, **per_graph, **batching)
                if stop > start else [])
        out = _gather_on_main(mine, graphs, ranges, dim, ctx)
    if not ctx.is_main:
        return None
    if store:
        for g, enc in zip(graphs, out):
            g.ndata[store] = enc
    return out


def _gather_on_main(mine: list, graphs: list, ranges: list, dim: int, ctx) -> list | None:
    """Every rank's encodings (one ``(n_i, dim)`` tensor per graph of its range) on rank 0, in graph
    order; one padded tensor per rank travels (a pickled list of tensors is many times slower)."""
    sizes = [g.num_nodes() for g in graphs]
    rows = [sum(sizes[a:b]) for a, b in ranges]
    # nccl moves CUDA tensors only
    device = torch.device("cuda", torch.cuda.current_device()) if ctx.backend == "nccl" else torch.device("cpu")
    local = torch.zeros(max(rows), dim, device=device)
    if mine:
        local[:rows[ctx.rank]] = torch.cat(mine).to(device)
    pieces = [torch.empty_like(local) for _ in ranges] if ctx.is_main else None
    dist.gather(local, pieces, dst=0)
    if not ctx.is_main:
        return None
    return list(torch.cat([piece[:count] for piece, count in zip(pieces, rows)]).cpu().split(sizes))
