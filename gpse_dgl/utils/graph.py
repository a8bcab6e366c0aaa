"""Canonical simple undirected views of DGL graphs.

Every PSE is defined on simple undirected graphs, so all inputs go through :func:`simple_edges`:
edge directions are dropped (directed input is symmetrised), self-loops and multi-edges removed.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch


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
    # which the stable sort (timsort) exploits; ~10x faster than np.unique's hash path on molecules.
    if key.size > 1:
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    return key // max(num_nodes, 1), key % max(num_nodes, 1)


def graph_simple_edges(g) -> tuple[np.ndarray, np.ndarray]:
    """:func:`simple_edges` of a (non-batched view of a) DGLGraph."""
    src, dst = g.edges()
    return simple_edges(src, dst, g.num_nodes())


def symmetric_csr(num_nodes: int, u: np.ndarray, v: np.ndarray):
    """Symmetric 0/1 ``scipy.sparse.csr_matrix`` adjacency from simple edges ``u < v``."""
    row = np.concatenate([u, v])
    col = np.concatenate([v, u])
    data = np.ones(row.shape[0], dtype=np.float64)
    return sp.csr_matrix((data, (row, col)), shape=(num_nodes, num_nodes))
