"""Source ``random``: N(0, 1) features fixed per graph, concatenated to the node features.

Graph ``i`` draws ``model.pe.random_dim`` features per node from its own generator seeded by
``(model.pe.random_seed, i)`` (:func:`gpse_dgl.nn.random_features.random_node_features`), so identical
copies of a graph get different features and every run sees the same ones. Not the paper's ``rand``
(fresh noise in place of the node features: :mod:`.fresh_random`).

Example
-------
>>> import dgl
>>> from gpse_dgl.train.downstream.pe_sources.fixed_random import random_features
>>> random_features([dgl.graph(([0], [1]))] * 2, dim=4, seed=0).values.shape
torch.Size([4, 4])
"""
from __future__ import annotations

from typing import Sequence

import torch

from .... import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl

from ....nn.random_features import random_node_features
from .table import NodeTable
from .spec import PESource


def random_features(graphs: Sequence, dim: int = 20, seed: int = 0) -> NodeTable:
    """N(0, 1) features, graph ``i`` drawn from its own generator seeded by ``(seed, i)``.

    Keyed by the graph's index, not its structure, so identical copies of a graph get different
    features (as they would with a fresh draw) while every run sees the same features.
    """
    graphs = list(graphs)
    values = []
    chunk = 4096  # bound the batched graph's size
    for start in range(0, len(graphs), chunk):
        part = graphs[start:start + chunk]
        batch = dgl.batch([dgl.graph(([], []), num_nodes=g.num_nodes()) for g in part])
        keys = list(range(start, start + len(part)))
        values.append(random_node_features(batch, dim=dim, seed=seed, graph_keys=keys))
    counts = torch.tensor([g.num_nodes() for g in graphs], dtype=torch.long)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
    return NodeTable(torch.cat(values) if values else torch.zeros(0, dim), offsets)


def describe():
    return PESource(
        "random", "N(0, 1) features fixed per graph (model.pe.random_dim, random_seed), concatenated",
        compute=lambda graphs, pe, device, progress: random_features(graphs, pe.get("random_dim", 20),
                                                                     pe.get("random_seed", 0)),
        width=lambda pe: pe.get("random_dim", 20),
        settings=lambda pe: {"random_dim": pe.get("random_dim", 20), "random_seed": pe.get("random_seed", 0)},
        cached=False)
