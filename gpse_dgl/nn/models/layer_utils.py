"""Helpers shared by the downstream layers: graphs vs DGL message-flow blocks, parameter resets.

DGL's samplers produce blocks whose destination nodes are the first ``num_dst_nodes()`` source nodes,
so a layer's "self" features are ``feat[:num_dst_nodes]``; for an ordinary graph that is all of ``feat``.
"""
from __future__ import annotations

import torch
from torch import nn

from ... import _env  # noqa: F401
import dgl

from ...utils.graph_cache import cached_on_graph


def dst_features(graph: dgl.DGLGraph, feat: torch.Tensor) -> torch.Tensor:
    """Rows of ``feat`` that belong to the destination nodes of ``graph``: ``feat`` itself for a graph (a slice
    would cost a zero-filled gradient and a copy in the backward pass), a view of its first rows for a block."""
    num_dst = graph.num_dst_nodes()
    return feat if num_dst == feat.shape[0] else feat[:num_dst]


def with_self_loops(graph: dgl.DGLGraph) -> dgl.DGLGraph:
    """``graph`` (or block) with exactly one self-loop per destination node; cached on ``graph``.

    Existing self-loops are dropped first so none is counted twice (PyG's ``add_self_loops`` rule).
    Only the structure is copied: ndata/edata are not needed by the layers that call this.
    """
    def build():
        src, dst = graph.edges()
        keep = src != dst
        loops = torch.arange(graph.num_dst_nodes(), dtype=src.dtype, device=src.device)
        src, dst = torch.cat([src[keep], loops]), torch.cat([dst[keep], loops])
        if graph.is_block:
            return dgl.create_block((src, dst), num_src_nodes=graph.num_src_nodes(),
                                    num_dst_nodes=graph.num_dst_nodes(), device=graph.device)
        return dgl.graph((src, dst), num_nodes=graph.num_nodes(), device=graph.device)

    return cached_on_graph(graph, "self_loop_graph", None, build)


def layer_graphs(graph, num_layers: int) -> list:
    """One graph per layer: ``[graph] * num_layers`` for a graph, the blocks themselves for a block list."""
    if isinstance(graph, (list, tuple)):
        if len(graph) != num_layers:
            raise ValueError(f"got {len(graph)} message-flow blocks for a {num_layers}-layer model")
        return list(graph)
    return [graph] * num_layers


def reset_module(module: nn.Module | None) -> None:
    """Re-initialise ``module``: its own ``reset_parameters`` if it has one (which owns the scheme for its
    whole subtree, e.g. DGL-style Xavier inits), otherwise :func:`reset_submodules`."""
    if module is None:
        return
    reset = getattr(module, "reset_parameters", None)
    if callable(reset):
        reset()
    else:
        reset_submodules(module)


def reset_submodules(module: nn.Module) -> None:
    """Re-initialise every child of ``module`` with :func:`reset_module` (not ``module`` itself)."""
    for child in module.children():
        reset_module(child)
