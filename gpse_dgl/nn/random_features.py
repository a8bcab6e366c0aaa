"""Random input features for GPSE that do not depend on how graphs are batched.

GPSE reads standard-normal random node features (20 per node by default). The reference
implementations draw them from the global numpy RNG for the whole batch, so a graph's encoding changes
with every call and with the other graphs in its batch. Here, with a ``seed``, every graph of a batch
gets its own ``torch.Generator`` seeded from ``(seed, key)``, where ``key`` is the graph's index in its
dataset (``graph_keys``) or, by default, a hash of its structure (node count and edge multiset, in its
own node numbering). The same graph with the same seed therefore gets the same features in any batch,
at any batch size and on any device (features are drawn on the CPU and then moved). Without a seed the
whole batch is one fresh draw, as in the reference (the pretraining setting).

Example
-------
>>> import dgl, torch
>>> from gpse_dgl.nn.random_features import random_node_features
>>> g1 = dgl.graph(([0, 1], [1, 2]), num_nodes=3)
>>> g2 = dgl.graph(([0], [1]), num_nodes=2)
>>> a = random_node_features(dgl.batch([g1, g2]), dim=4, seed=0)
>>> b = random_node_features(dgl.batch([g2, g1, g1]), dim=4, seed=0)
>>> torch.equal(a[:3], b[2:5]) and torch.equal(a[3:], b[:2])
True
"""
from __future__ import annotations

from typing import Sequence

import torch

from .. import _env  # noqa: F401
import dgl

__all__ = ["random_node_features", "structure_keys", "graph_seed"]

_M32 = (1 << 32) - 1
_M64 = (1 << 64) - 1
# Multipliers below 2**31 keep every product of a 32-bit value inside int64 (no overflow).
_C1, _C2 = 0x45D9F3B, 0x2C1B3C6D


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser on int64 tensors holding values in ``[0, 2**32)``."""
    x = x ^ (x >> 16)
    x = (x * _C1) & _M32
    x = x ^ (x >> 16)
    x = (x * _C1) & _M32
    x = x ^ (x >> 16)
    return x


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def structure_keys(graph: dgl.DGLGraph) -> list[int]:
    """A 64-bit structural hash per graph of a batched ``DGLGraph`` (vectorised, no per-graph loop).

    The hash depends on the node count and the multiset of directed edges in the graph's own node
    numbering (edge order and batch position do not matter); relabelling nodes changes it.
    """
    bnn = graph.batch_num_nodes().to("cpu", torch.int64)
    bne = graph.batch_num_edges().to("cpu", torch.int64)
    b = len(bnn)
    offsets = torch.cumsum(bnn, 0) - bnn
    src, dst = graph.edges()
    src, dst = src.to("cpu", torch.int64), dst.to("cpu", torch.int64)
    eg = torch.repeat_interleave(torch.arange(b), bne)
    u = (src - offsets[eg]) & _M32
    v = (dst - offsets[eg]) & _M32
    halves = []
    for salt in (0x3C6EF372, 0x1B873593):
        h = _mix32(((_mix32(u ^ salt) * 31) + v) & _M32)
        total = torch.zeros(b, dtype=torch.int64).index_add_(0, eg, h) & _M32
        size = _mix32((bnn * 1_000_003 + bne + salt) & _M32)
        halves.append(_mix32(total ^ size))
    keys = (halves[0] << 32) | halves[1]
    return [k & _M64 for k in keys.tolist()]


def graph_seed(seed: int, key: int) -> int:
    """The generator seed of the graph with ``key`` under the global ``seed`` (63-bit, stable)."""
    return _splitmix64((_splitmix64(int(seed) & _M64) ^ (int(key) & _M64)) & _M64) >> 1


def random_node_features(
    graph: dgl.DGLGraph,
    dim: int = 20,
    seed: int | None = None,
    graph_keys: Sequence[int] | torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    device=None,
) -> torch.Tensor:
    """Standard-normal node features ``(N, dim)`` (float32) for a graph or a batch of graphs.

    Parameters
    ----------
    graph : dgl.DGLGraph
        A graph or a ``dgl.batch`` of graphs.
    dim : int
        Features per node.
    seed : int, optional
        ``None`` (default): one fresh draw for the whole batch (from ``generator`` if given, else
        torch's global RNG), like the reference implementation. An int: graph ``i`` of the batch gets
        its ``(n_i, dim)`` block from ``torch.Generator().manual_seed(graph_seed(seed, key_i))``, so the
        block does not depend on the rest of the batch or on the device.
    graph_keys : sequence of int or tensor, optional
        One key per graph of the batch (e.g. its index in the dataset). Default: a structural hash
        (:func:`structure_keys`), so identical graphs get identical features.
    generator : torch.Generator, optional
        CPU generator for the unseeded draw; ignored when ``seed`` is given.
    device : torch.device or str, optional
        Where to put the result (drawn on the CPU in every case). Default: the CPU.

    Returns
    -------
    torch.Tensor
        ``(graph.num_nodes(), dim)`` float32.
    """
    n = int(graph.num_nodes())
    if seed is None:
        out = torch.randn(n, dim, generator=generator)
    else:
        bnn = graph.batch_num_nodes().to("cpu", torch.int64).tolist()
        if graph_keys is None:
            keys = structure_keys(graph)
        else:
            keys = graph_keys.tolist() if isinstance(graph_keys, torch.Tensor) else list(graph_keys)
            if len(keys) != len(bnn):
                raise ValueError(f"graph_keys has {len(keys)} entries for a batch of {len(bnn)} graphs")
        out = torch.empty(n, dim)
        gen = torch.Generator()
        start = 0
        for n_i, key in zip(bnn, keys):
            if n_i:
                gen.manual_seed(graph_seed(seed, int(key)))
                torch.randn(n_i, dim, generator=gen, out=out[start:start + n_i])
            start += n_i
    return out if device is None else out.to(device)
