r"""Cycle-count graph encodings (CycleGE, graph level, 7 columns).

.. math:: \mathrm{CycleGE}_k = |\{\text{simple cycles of length } k\}|, \qquad k = 2, \dots, 8,

raw counts, each cycle once (not per starting node or direction). A "2-cycle" is an undirected edge, so
the first column is the number of edges. The enumeration itself lives in :mod:`gpse_dgl.pse.cycles`
(one vectorised pass over all graphs of a collection); this module adapts it to the registry.
It needs no dense matrix, so graphs above ``dense_limit`` are counted too; ``max_cycle_paths`` (driver
option) bounds the work on graphs with too many paths, where :mod:`.cycles` raises
:class:`~gpse_dgl.utils.errors.GraphTooLargeError`.
"""
from __future__ import annotations

import torch

from .cycles import count_cycles

LENGTHS = tuple(range(2, 9))
DESCRIPTION = "numbers of simple cycles of length 2..8 (length 2 = edges; graph level)"


def cycle_ge(collection, options=None) -> torch.Tensor:
    """CycleGE of every graph of an :class:`~gpse_dgl.pse.spectral.EdgeCollection`: ``(G, 7)``."""
    kwargs = {}
    if options and options.get("max_cycle_paths") is not None:
        kwargs["max_paths"] = options["max_cycle_paths"]
    counts = count_cycles(collection.total_nodes, collection.u, collection.v, collection.node_graph,
                          collection.num_graphs, max_length=LENGTHS[-1], **kwargs)
    return torch.as_tensor(counts).to(torch.float64)
