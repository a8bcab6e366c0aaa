"""GPSE pretraining targets: 51 standardised node columns and 11 raw graph columns (``docs/PSE.md``).

Node-level targets are, in this order, ElstaticPE (7) | LapPE (4) | RWSE (20) | HKdiagSE (20), each column
standardised per graph (:mod:`.standardize`). Graph-level targets are EigVals (4) | CycleGE (7), raw.
NaN anywhere is 0.

Example
-------
>>> from gpse_dgl.data.molecules import load_embedded_molecules
>>> from gpse_dgl.pse import pretraining_targets, target_columns
>>> graphs = [g.clone() for g in load_embedded_molecules()[:8]]  # clones: the set is shared in memory
>>> y_graph = pretraining_targets(graphs)            # (8, 11); sets ndata["gpse_node_target"] (n, 51)
>>> target_columns()[:2], len(target_columns())
([('ElstaticPE', 0), ('ElstaticPE', 1)], 62)
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..utils.graph import graph_list
from .compute import DEFAULT_DENSE_LIMIT, compute_pse_tensors, write_ndata
from .registry import GRAPH_TARGETS, NODE_TARGETS, PSE_REGISTRY

__all__ = ["pretraining_targets", "target_columns", "target_dims", "NODE_TARGET_KEY"]

#: ``ndata`` key of the standardised node-level targets.
NODE_TARGET_KEY = "gpse_node_target"


def _check_level(names: Sequence[str], level: str) -> list[str]:
    out = []
    for name in names:
        spec = PSE_REGISTRY.get(name)
        if spec is None:
            raise ValueError(f"unknown PSE {name!r}; choose from {', '.join(PSE_REGISTRY)}")
        if spec.level != level:
            raise ValueError(f"{name} is a {spec.level}-level PSE, not a {level}-level target")
        out.append(name)
    return out


def target_dims(node_names: Sequence[str] = NODE_TARGETS, graph_names: Sequence[str] = GRAPH_TARGETS):
    """``(node columns, graph columns)``; ``(51, 11)`` for the default targets."""
    node = _check_level(node_names, "node")
    graph = _check_level(graph_names, "graph")
    return sum(PSE_REGISTRY[n].dim for n in node), sum(PSE_REGISTRY[n].dim for n in graph)


def target_columns(node_names: Sequence[str] = NODE_TARGETS,
                   graph_names: Sequence[str] = GRAPH_TARGETS) -> list[tuple[str, int]]:
    """``(pse_name, column index within that PSE)`` for every target column.

    Node columns come first (aligned with ``ndata["gpse_node_target"]``), then graph columns (aligned with
    the tensor :func:`pretraining_targets` returns): 51 + 11 = 62 entries by default. Group by name to
    report R^2 per PSE.
    """
    cols = []
    for name in _check_level(node_names, "node") + _check_level(graph_names, "graph"):
        cols.extend((name, i) for i in range(PSE_REGISTRY[name].dim))
    return cols


def pretraining_targets(
    graphs,
    node_names: Sequence[str] = NODE_TARGETS,
    graph_names: Sequence[str] = GRAPH_TARGETS,
    *,
    key: str = NODE_TARGET_KEY,
    dense_limit: int = DEFAULT_DENSE_LIMIT,
    max_cycle_paths: Optional[int] = None,
    progress: bool = False,
    device=None,
) -> torch.Tensor:
    """Compute GPSE's pretraining targets for many graphs (batched).

    Parameters
    ----------
    graphs : dgl.DGLGraph or list of dgl.DGLGraph
        Graphs (a batched graph counts as its members). Only ``ndata[key]`` is written; the individual
        PSEs are not left in ``ndata``.
    node_names, graph_names : sequence of str
        Node-level and graph-level PSEs, in target order.
    key : str
        ``ndata`` key of the standardised ``(n, 51)`` float32 node targets.
    dense_limit, max_cycle_paths, progress, device
        As in :func:`gpse_dgl.pse.compute_pses`.

    Returns
    -------
    torch.Tensor
        float32 ``(G, 11)`` raw graph-level targets, one row per graph.
    """
    node_names = _check_level(node_names, "node")
    graph_names = _check_level(graph_names, "graph")
    glist, _ = graph_list(graphs)
    result = compute_pse_tensors(glist, node_names + graph_names, normalize=True, progress=progress,
                                 dense_limit=dense_limit, max_cycle_paths=max_cycle_paths, device=device)
    num_graphs, total = result.num_nodes.shape[0], int(result.num_nodes.sum())
    counts = result.num_nodes.tolist() if num_graphs == len(glist) else None
    node = torch.cat([result.node[n] for n in node_names], dim=1) if node_names else torch.zeros(total, 0)
    write_ndata(glist, {key: node}, counts)
    if not graph_names:
        return torch.zeros(num_graphs, 0)
    return torch.cat([result.graph[n] for n in graph_names], dim=1)
