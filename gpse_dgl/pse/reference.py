"""Plain per-graph reference implementations of the six PSEs (ground truth for tests, benchmark baseline).

Each function follows the definitions of ``docs/PSE.md`` literally, one graph at a time, with dense
numpy matrices: one ``np.linalg.eigh`` per PSE and graph, ``np.linalg.matrix_power`` for random walks,
``networkx.simple_cycles`` for cycles. They share no code with the batched implementation
(:mod:`gpse_dgl.pse.compute`) on purpose, apart from reading the graph through
:func:`gpse_dgl.utils.graph.graph_simple_edges` (the common input convention). They are slow: use
:func:`gpse_dgl.pse.compute_pses` for real work.

Every function takes the dense 0/1 adjacency ``A`` (``n x n``, symmetric, zero diagonal) of one graph;
:func:`dense_adjacency` builds it from a DGLGraph and :func:`reference_pses` runs the selected PSEs.
NaN is turned into 0 as the reference does; ElstaticPE's last two columns use the documented definition
(0 for isolated nodes only, not the authors' whole-graph NaN quirk).
"""
from __future__ import annotations

import numpy as np

from ..utils.graph import graph_simple_edges

__all__ = [
    "dense_adjacency", "reference_pses", "ref_lap_pe", "ref_eigvals", "ref_elstatic_pe", "ref_rwse",
    "ref_hkdiag_se", "ref_cycle_ge", "ref_standardize",
]

EPS = 1e-6


def dense_adjacency(g) -> np.ndarray:
    """Dense float64 symmetric adjacency of the simple undirected graph underlying DGLGraph ``g``."""
    n = g.num_nodes()
    u, v = graph_simple_edges(g)
    adj = np.zeros((n, n))
    adj[u, v] = 1.0
    adj[v, u] = 1.0
    return adj


def _normalized_laplacian(adj: np.ndarray) -> np.ndarray:
    deg = adj.sum(1)
    d_inv_sqrt = np.zeros_like(deg)
    d_inv_sqrt[deg > 0] = deg[deg > 0] ** -0.5
    return np.eye(adj.shape[0]) - d_inv_sqrt[:, None] * adj * d_inv_sqrt[None, :]


def _kept_eigenpairs(adj: np.ndarray, k: int = 4):
    """The first ``k`` eigenpairs of L_sym after the zero eigenvalues (possibly fewer)."""
    evals, evecs = np.linalg.eigh(_normalized_laplacian(adj))
    offset = int((np.abs(evals) < EPS).sum())
    idx = np.argsort(evals)[offset:offset + k]
    return evals[idx], evecs[:, idx]


def ref_lap_pe(adj: np.ndarray, k: int = 4) -> np.ndarray:
    """LapPE ``(n, k)``: |L2-normalised eigenvectors| of the first k non-zero eigenvalues, 0-padded."""
    n = adj.shape[0]
    _, vecs = _kept_eigenpairs(adj, k)
    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=0, keepdims=True), 1e-12)
    out = np.zeros((n, k))
    out[:, :vecs.shape[1]] = np.abs(vecs)
    return out


def ref_eigvals(adj: np.ndarray, k: int = 4) -> np.ndarray:
    """EigVals ``(k,)``: first k non-zero eigenvalues of L_sym, clamped at 0, 0-padded."""
    vals, _ = _kept_eigenpairs(adj, k)
    out = np.zeros(k)
    out[:vals.shape[0]] = np.maximum(vals, 0.0)
    return out


def ref_elstatic_pe(adj: np.ndarray) -> np.ndarray:
    """ElstaticPE ``(n, 7)`` from the pseudo-inverse of L = D - A (see :mod:`.electrostatic`)."""
    n = adj.shape[0]
    if n == 0:
        return np.zeros((0, 7))
    deg = adj.sum(1)
    lap = np.diag(deg) - adj
    evals, evecs = np.linalg.eigh(lap)
    offset = int((evals < EPS).sum())
    if offset == n:
        return np.zeros((n, 7))
    pinv = (evecs[:, offset:] / evals[offset:]) @ evecs[:, offset:].T
    q = pinv - np.diag(pinv)[None, :]
    dinv = np.zeros(n)
    dinv[deg > 0] = 1.0 / deg[deg > 0]
    dinv_a = dinv[:, None] * adj
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.stack([
            q.min(axis=0), q.mean(axis=0), q.std(axis=0, ddof=1),
            q.min(axis=1), q.std(axis=1, ddof=1),
            (dinv_a * q).sum(axis=0), (dinv_a * q).sum(axis=1),
        ], axis=1)
    return np.nan_to_num(out)


def ref_rwse(adj: np.ndarray, steps=range(2, 22)) -> np.ndarray:
    """RWSE ``(n, len(steps))``: diag((D^-1 A)^k) by explicit matrix powers (isolated rows of P are 0)."""
    n = adj.shape[0]
    deg = adj.sum(1)
    dinv = np.zeros(n)
    dinv[deg > 0] = 1.0 / deg[deg > 0]
    p = dinv[:, None] * adj
    return np.stack([np.diag(np.linalg.matrix_power(p, k)) for k in steps], axis=1).reshape(n, len(steps))


def ref_hkdiag_se(adj: np.ndarray, times=range(1, 21)) -> np.ndarray:
    """HKdiagSE ``(n, len(times))``: sum over eigenpairs of L = D - A with eigenvalue > 1e-8."""
    n = adj.shape[0]
    lap = np.diag(adj.sum(1)) - adj
    evals, evecs = np.linalg.eigh(lap)
    evecs = evecs / np.maximum(np.linalg.norm(evecs, axis=0, keepdims=True), 1e-12)
    keep = evals > 1e-8
    evals, evecs = evals[keep], evecs[:, keep]
    return np.stack([(np.exp(-t * evals)[None, :] * evecs ** 2).sum(1) for t in times], axis=1).reshape(
        n, len(times))


def ref_cycle_ge(adj: np.ndarray, lengths=range(2, 9)) -> np.ndarray:
    """CycleGE ``(len(lengths),)``: number of simple cycles of each length; length 2 = number of edges."""
    import networkx as nx  # networkx: only this reference check uses it

    lengths = list(lengths)
    g = nx.Graph()
    g.add_nodes_from(range(adj.shape[0]))
    g.add_edges_from(zip(*np.nonzero(np.triu(adj, 1))))
    counts = dict.fromkeys(lengths, 0)
    if 2 in counts:
        counts[2] = g.number_of_edges()
    for cycle in nx.simple_cycles(g, length_bound=max(lengths)):
        if len(cycle) in counts and len(cycle) > 2:
            counts[len(cycle)] += 1
    return np.array([counts[k] for k in lengths], dtype=np.float64)


def ref_standardize(x: np.ndarray) -> np.ndarray:
    """Per-column standardisation of one graph's ``(n, d)`` node values (``docs/PSE.md``)."""
    x = np.nan_to_num(np.asarray(x, dtype=np.float64))
    n = x.shape[0]
    out = np.zeros_like(x)
    for c in range(x.shape[1]):
        col = x[:, c]
        if n < 2 or col.var(ddof=1) < 1e-5:
            continue
        out[:, c] = (col - col.mean()) / np.sqrt(col.var(ddof=0) + 1e-5)
    return np.nan_to_num(out)


_FUNCS = {
    "ElstaticPE": ref_elstatic_pe,
    "LapPE": ref_lap_pe,
    "RWSE": ref_rwse,
    "HKdiagSE": ref_hkdiag_se,
    "EigVals": ref_eigvals,
    "CycleGE": ref_cycle_ge,
}


def reference_pses(g, names=None, normalize: bool = False) -> dict:
    """Reference values of the PSEs ``names`` (default all six) for one DGLGraph, as float64 numpy arrays.

    Node-level PSEs are ``(n, dim)``, graph-level ``(dim,)``; ``normalize`` standardises node-level ones.
    """
    names = list(_FUNCS) if names is None else list(names)
    adj = dense_adjacency(g)
    out = {}
    for name in names:
        value = _FUNCS[name](adj)
        if normalize and name not in ("EigVals", "CycleGE"):
            value = ref_standardize(value)
        out[name] = value
    return out
