"""Canonical simple undirected views of DGL graphs: every "make it simple and undirected" helper.

Every PSE is defined on simple undirected graphs, so all inputs go through :func:`simple_edges`:
edge directions are dropped (directed input is symmetrised), self-loops and multi-edges removed. The
other helpers build on it:

* :func:`graph_simple_edges` - :func:`simple_edges` of a DGLGraph;
* :func:`undirected_graph` - a new bidirected simple DGLGraph from an edge list (datasets, skeleton edits);
* :func:`as_simple_undirected` / :func:`is_simple_undirected` - a DGLGraph (or batch) as the simple
  undirected graph GPSE encodes, unchanged when it already is one;
* :func:`symmetric_csr` - the scipy adjacency of simple edges;
* :func:`graph_list` - one DGLGraph or many as a list (what the functions taking either accept);
* :func:`structure_only` - a graph's nodes and edges, as they are, without their data.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from .. import _env  # noqa: F401
import dgl

__all__ = ["simple_edges", "graph_simple_edges", "undirected_graph", "is_simple_undirected",
           "as_simple_undirected", "symmetric_csr", "graph_list", "structure_only"]


def simple_edges(src, dst, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the undirected simple edge set as two int64 arrays with ``u < v``, each edge once, sorted.

    Self-loops are removed, multi-edges merged, and (u, v) / (v, u) identified.
    """
    src = np.asarray(src.cpu() if isinstance(src, torch.Tensor) else src, dtype=np.int64)
    dst = np.asarray(dst.cpu() if isinstance(dst, torch.Tensor) else dst, dtype=np.int64)
    u, v = np.minimum(src, dst), np.maximum(src, dst)
    keep = u != v
    key = np.sort(u[keep] * np.int64(max(num_nodes, 1)) + v[keep], kind="stable")
    # Sorted-run dedup instead of np.unique: DGL's edge lists come grouped by graph and mostly ordered,
    # which the stable sort (timsort) exploits, unlike np.unique's hash path.
    if key.size > 1:
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    return key // max(num_nodes, 1), key % max(num_nodes, 1)


def graph_simple_edges(g) -> tuple[np.ndarray, np.ndarray]:
    """:func:`simple_edges` of a (non-batched view of a) DGLGraph."""
    src, dst = g.edges()
    return simple_edges(src, dst, g.num_nodes())


def undirected_graph(num_nodes: int, u, v, ndata: dict | None = None):
    """Bidirected simple DGLGraph from undirected edges (duplicates / self-loops / direction dropped): every
    pair ``u -> v`` (``u < v``, sorted) first, then the reverse edges in the same order."""
    su, sv = simple_edges(u, v, num_nodes)
    src = torch.from_numpy(np.concatenate([su, sv]))
    dst = torch.from_numpy(np.concatenate([sv, su]))
    g = dgl.graph((src, dst), num_nodes=int(num_nodes))
    for k, val in (ndata or {}).items():
        g.ndata[k] = torch.as_tensor(val)
    return g


def _edges_numpy(g: dgl.DGLGraph) -> tuple[np.ndarray, np.ndarray]:
    src, dst = g.edges()
    return src.cpu().numpy().astype(np.int64, copy=False), dst.cpu().numpy().astype(np.int64, copy=False)


def is_simple_undirected(g: dgl.DGLGraph) -> bool:
    """Whether ``g`` has no self-loop, no duplicate edge, and ``v -> u`` for every ``u -> v``.

    Parameters
    ----------
    g : DGLGraph
        A graph or a batched graph (batched graphs never have edges between members, so the test is
        the same).

    Examples
    --------
    >>> import dgl
    >>> is_simple_undirected(dgl.graph(([0, 1], [1, 0])))
    True
    >>> is_simple_undirected(dgl.graph(([0], [1])))
    False
    """
    src, dst = _edges_numpy(g)
    if src.size == 0:
        return True
    if np.any(src == dst):
        return False
    n = np.int64(max(g.num_nodes(), 1))
    fwd = np.sort(src * n + dst)
    if np.any(fwd[1:] == fwd[:-1]):
        return False
    return bool(np.array_equal(fwd, np.sort(dst * n + src)))


def as_simple_undirected(g: dgl.DGLGraph) -> dgl.DGLGraph:
    """The simple undirected version of ``g`` (both directions of every edge), keeping node data.

    ``g`` itself is returned when it already is simple and undirected. Batched graphs stay batched
    with the same members (each member is made simple and undirected on its own). Edge data is dropped
    when the edge set has to change, because edges no longer correspond one to one.

    Parameters
    ----------
    g : DGLGraph
        Graph or batched graph, on the CPU.

    Returns
    -------
    DGLGraph

    Examples
    --------
    >>> import dgl
    >>> h = as_simple_undirected(dgl.graph(([0, 0, 2], [1, 1, 2]), num_nodes=3))
    >>> sorted(zip(*[t.tolist() for t in h.edges()]))
    [(0, 1), (1, 0)]
    """
    if is_simple_undirected(g):
        return g
    src, dst = _edges_numpy(g)
    u, v = simple_edges(src, dst, g.num_nodes())
    # Interleave (u, v), (v, u) so each member's edges stay contiguous after sorting by member below.
    new_src = np.stack([u, v], axis=1).reshape(-1)
    new_dst = np.stack([v, u], axis=1).reshape(-1)
    out = dgl.graph((torch.from_numpy(new_src), torch.from_numpy(new_dst)), num_nodes=g.num_nodes(),
                    idtype=g.idtype)
    for key, value in g.ndata.items():
        out.ndata[key] = value
    if g.batch_size > 1:
        counts = g.batch_num_nodes()
        offsets = np.concatenate([[0], np.cumsum(counts.numpy())])
        member = np.searchsorted(offsets, new_src, side="right") - 1
        # simple_edges sorts by u, and members occupy consecutive node ranges: edges are grouped by member.
        out.set_batch_num_nodes(counts)
        out.set_batch_num_edges(torch.from_numpy(np.bincount(member, minlength=g.batch_size)).to(counts.dtype))
    return out


def symmetric_csr(num_nodes: int, u: np.ndarray, v: np.ndarray):
    """Symmetric 0/1 ``scipy.sparse.csr_matrix`` adjacency from simple edges ``u < v``."""
    row = np.concatenate([u, v])
    col = np.concatenate([v, u])
    data = np.ones(row.shape[0], dtype=np.float64)
    return sp.csr_matrix((data, (row, col)), shape=(num_nodes, num_nodes))


def graph_list(graphs) -> tuple[list, bool]:
    """``(list of DGLGraphs, whether one graph was given)`` from one DGLGraph or an iterable of them.

    >>> import dgl
    >>> graph_list(dgl.graph(([0], [1])))[1], len(graph_list([dgl.graph(([0], [1]))] * 2)[0])
    (True, 2)
    """
    if isinstance(graphs, dgl.DGLGraph):
        return [graphs], True
    graphs = list(graphs)
    for g in graphs:
        if not isinstance(g, dgl.DGLGraph):
            raise TypeError(f"expected DGLGraph objects, got {type(g).__name__}")
    return graphs, False


def structure_only(g: dgl.DGLGraph, idtype: torch.dtype | None = None) -> dgl.DGLGraph:
    """``g``'s nodes and edges (as they are: not made simple) without node or edge data, in ``idtype`` (default
    ``g``'s): graphs of a dataset may carry different data, which ``dgl.batch`` refuses to join, and a list of
    graphs kept for their structure alone should not hold their features.

    >>> import dgl, torch
    >>> g = dgl.graph(([0, 1], [1, 2]))
    >>> g.ndata["x"] = torch.zeros(3)
    >>> h = structure_only(g)
    >>> h.num_nodes(), h.num_edges(), list(h.ndata)
    (3, 2, [])
    """
    src, dst = g.edges()
    return dgl.graph((src, dst), num_nodes=g.num_nodes(), idtype=idtype or g.idtype)
