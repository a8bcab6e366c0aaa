r"""Destination chunks: a graph's in-edges grouped by destination and cut into consecutive ranges.

Layer-wise inference (:mod:`gpse_dgl.encode.large_graph`, and on ``dgl.distributed``
:mod:`gpse_dgl.distributed.encode`) updates the destinations of a layer range by range, so that a range's
temporaries stay bounded. With :math:`p` the in-edge offsets by destination (CSR), a range
:math:`[a, b)` is the longest with

.. math::

    p_b - p_a \le E \quad (\text{or } b = a + 1), \qquad b - a \le N_{\max}

for the edge budget :math:`E` and the node cap :math:`N_{\max}`; its edges are cut into pieces of at most
:math:`E` (a destination with more in-edges than the budget, such as a virtual node, gets a range of its own
in several pieces). Edges keep their order within a destination (a stable sort), so every destination sums
its in-edges in edge-id order.

Example
-------
>>> import torch
>>> plan = plan_destinations(torch.tensor([0, 1, 2, 0]), torch.tensor([1, 2, 0, 2]), 3, chunk_edges=2,
...                          max_nodes=8)
>>> [(start, stop, [(p.start, p.stop) for p in pieces]) for start, stop, pieces in plan.ranges]
[(0, 2, [(0, 2)]), (2, 3, [(2, 4)])]
>>> plan.sources.tolist(), plan.destinations.tolist()
([2, 0, 1, 0], [0, 1, 2, 2])
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["DestinationPlan", "plan_destinations"]


@dataclass(frozen=True)
class DestinationPlan:
    """``indptr``: in-edge offsets by destination (``num_dst + 1``); ``sources`` / ``destinations``: the edges
    sorted (stably) by destination; ``ranges``: ``(start, stop, pieces)`` per range of destinations, each piece
    a ``slice`` of the sorted edges (one empty piece for a range without in-edges)."""

    indptr: np.ndarray
    sources: torch.Tensor
    destinations: torch.Tensor
    ranges: list


def plan_destinations(src: torch.Tensor, dst: torch.Tensor, num_dst: int, chunk_edges: int,
                      max_nodes: int) -> DestinationPlan:
    """The edges ``src -> dst`` (int64, destinations in ``0 .. num_dst - 1``) grouped by destination and cut
    into ranges of at most ``chunk_edges`` in-edges (or one destination) and ``max_nodes`` destinations."""
    order = torch.sort(dst, stable=True).indices
    sources, destinations = src[order], dst[order]
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(destinations.numpy(), minlength=num_dst), out=indptr[1:])
    ranges, start = [], 0
    while start < num_dst:
        stop = int(np.searchsorted(indptr, indptr[start] + chunk_edges, side="right")) - 1
        stop = min(max(stop, start + 1), start + max_nodes, num_dst)
        lo, hi = int(indptr[start]), int(indptr[stop])
        ranges.append((start, stop, [slice(a, min(a + chunk_edges, hi)) for a in range(lo, max(hi, lo + 1),
                                                                                         chunk_edges)]))
        start = stop
    return DestinationPlan(indptr, sources, destinations, ranges)
