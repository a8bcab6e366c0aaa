r"""LapPE / EigVals and RWSE for large graphs, with sparse matrices only (no ``n x n`` allocation).

Notation: simple undirected graph, adjacency :math:`A`, degrees :math:`d`, :math:`D^{-1/2}_{ii} = 0` for
isolated nodes, :math:`S = D^{-1/2} A D^{-1/2}`, normalised Laplacian :math:`L = I - S` (an isolated node
keeps :math:`L_{ii} = 1`), random walk :math:`P = D^{-1} A`.

Known eigenvectors
------------------
For every connected component :math:`C` with at least two nodes, :math:`\phi_C = D^{1/2} 1_C /
\sqrt{\mathrm{vol}(C)}` is a unit eigenvector of :math:`S` with eigenvalue 1 (of :math:`L` with 0), and
these span the null space of :math:`L`. If :math:`C` is bipartite with sides :math:`\sigma = \pm 1`,
:math:`\psi_C = \sigma \odot \phi_C` is an eigenvector of :math:`S` with eigenvalue -1. Components and
sides come from two ``connected_components`` calls (the graph and its bipartite double cover).

LapPE (:func:`sparse_lap_pe`)
-----------------------------
The k smallest non-zero eigenpairs of :math:`L` are the k smallest over all components (the spectrum of
:math:`L` is the union of the components' spectra; eigenvectors are zero outside their component).
Per component:

* size <= ``dense_max`` (default 256): dense ``numpy.linalg.eigh`` of the component's :math:`L`, batched
  over components of equal size, dropping the one zero eigenvalue (an isolated node gives eigenvalue 1
  with eigenvector :math:`e_i`);
* larger: :func:`.eigensolvers.component_pairs`, which picks per component either shift-invert (Lanczos
  on :math:`L^+`, applied through one sparse factorisation of the grounded combinatorial Laplacian, whose
  memory is bounded before it starts by its envelope in reverse Cuthill-McKee order, ``factor_max``) or,
  where that envelope is too large (expander-like graphs, whose small eigenvalues are not clustered),
  plain Lanczos on :math:`2I - L` with the null vector deflated in closed form. Chains, meshes, trees and
  stars take the first (a path of 80,000 nodes, eigenvalues from 7.7e-10: ~0.5 s), power-law and random
  graphs the second. Repeated eigenvalues come out with their multiplicity (rounds with the vectors found
  so far deflated). ``v0`` is seeded, so results are deterministic.

Eigenvalues are clamped at 0, eigenvectors are unit-norm and then made non-negative (absolute value), and
missing pairs (fewer than k non-zero eigenvalues) are padded with 0. Deviation from the dense reference:
the null space is dropped exactly (one eigenvalue per component) instead of by the threshold
:math:`|\lambda| < 10^{-6}`; they differ only for components with a genuine eigenvalue below 1e-6
(e.g. paths of more than ~2,000 nodes), where the dense threshold would discard real eigenpairs.

RWSE (:func:`sparse_rwse`)
--------------------------
:math:`P^k = D^{-1/2} S^k D^{1/2}`, so :math:`\mathrm{diag}(P^k) = \mathrm{diag}(S^k)` (0 on isolated
nodes), and with :math:`S` symmetric, for :math:`h = \lfloor k/2 \rfloor`:

.. math:: (S^k)_{ii} = \langle S^h e_i, S^{k-h} e_i \rangle.

* ``method="exact"``: the identity above on blocks of unit vectors :math:`E_B` (dense ``n x B`` blocks),
  iterating :math:`Y_t = S^t E_B` for :math:`t \le \lceil k_{max}/2 \rceil` and keeping two blocks at a
  time. Exact to rounding, memory ``O(n B)``, work ``~ (k_max / 2) n nnz(A)`` multiply-adds: fine up to
  tens of thousands of nodes.
* ``method="hutchinson"``: unbiased stochastic estimate, for any size. With the known eigenvectors,
  :math:`S^k = T_k + R^k`, :math:`T_k = \sum_C \phi_C\phi_C^\top + (-1)^k \sum_{C\,bip.} \psi_C\psi_C^\top`
  (its diagonal is exact and cheap) and :math:`R = S Q`, :math:`Q` the projector off those vectors. For
  :math:`N` Rademacher probes :math:`z_j` (seeded), with :math:`Y_t = R^t Z`,

  .. math:: \widehat{(R^k)_{ii}} = \frac1N \sum_j (Y_h)_{ij} (Y_{k-h})_{ij},

  which is unbiased because :math:`E[z z^\top] = I`. Splitting the power symmetrically (instead of the
  plain Hutchinson :math:`z_i (R^k z)_i`) makes even powers a Johnson-Lindenstrauss norm estimate
  (non-negative, relative standard deviation at most :math:`\sqrt{2/N}`) and halves the number of
  sparse products; deflation makes the error decay with the second-largest :math:`|\mu|` of :math:`S`
  instead of staying at the size of :math:`\phi_i^2` for large k. Besides, diagonals of small powers are
  computed exactly from sparse powers :math:`S^h` while ``nnz(S^h)`` stays below ``exact_nnz``
  (default ``max(2^22, 16 n)``)
  (:math:`(S^{2h})_{ii} = \|row_i S^h\|^2`, :math:`(S^{2h-1})_{ii} = \langle row_i S^{h-1}, row_i S^h \rangle`).

  Estimates are clipped to [0, 1] (they are probabilities): unbiased before clipping, and clipping can
  only move an entry closer to its true value (it adds a small positive bias to steps whose true values
  are ~0, e.g. odd steps on nearly bipartite graphs).

  Measured error (``tests/test_pse_sparse.py``, seed 0; 2,000-node Erdos-Renyi graph, mean degree ~4,
  plus small components and isolated nodes; steps 2..21; exact sparse powers switched off):
  N = 256 probes: mean absolute error 1.6e-3, max 7.8e-2 (at step 2, values up to 0.5), relative mean
  absolute error of the even steps ~5 %; N = 1,024: 7.9e-4 / 3.9e-2 / ~2.5 % (error ~ 1/sqrt(N)). With
  the default ``exact_nnz`` that graph is exact at every step. On a 20,000-node random graph (mean
  degree 4) the defaults are exact for steps 2..6 and give mean / max absolute error 3.6e-4 / 3.9e-2
  over steps 2..21, at a small fraction of the exact method's cost.
* ``method="auto"`` (default): exact when ``n * (nnz(A) + n) <= exact_work`` (default 2e8, a few
  seconds), otherwise hutchinson.

Cost and bounds: nothing on this path allocates ``n x n``. LapPE: ARPACK keeps ``~24 n`` floats, the
factorisation at most twice its envelope (``factor_max``, checked before factorising). RWSE "exact": dense
``n x B`` blocks (``_BLOCK_ENTRIES``), work ``~ (k_max / 2) n nnz(A)``; "hutchinson": ``n x B`` probe blocks,
and sparse powers :math:`S^h` only while the next product's multiply-adds (priced beforehand, they bound
its entries) stay within ``4 exact_nnz``: on a hub :math:`S \cdot S` costs :math:`\sum_j d_j^2`, so a star
gets no exact power beyond :math:`S^1` but is still exact, since deflation leaves :math:`R = 0` there
(the spectrum of a star's :math:`S` is :math:`\pm 1` and 0). Exact vs estimated: steps served by sparse
powers (every step on paths and cycles of any size, as the default budget grows with ``n``; the first
few on grids and power-law graphs) are exact to rounding;
the others are the seeded, unbiased estimate above (error ~ :math:`1/\sqrt{N}`).
"""
from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ..utils.graph import simple_edges, symmetric_csr
from .eigensolvers import DEFAULT_FACTOR_MAX, component_pairs

__all__ = ["sparse_lap_pe", "sparse_rwse", "graph_components"]

_LOG = logging.getLogger(__name__)

# Memory for one dense block (float64 entries) in the exact RWSE and in the batched dense eigh.
_BLOCK_ENTRIES = 1 << 22


# ----------------------------------------------------------------------------------------------------
# shared structure
# ----------------------------------------------------------------------------------------------------
def _normalised_adjacency(num_nodes: int, u: np.ndarray, v: np.ndarray):
    """``(S, deg)``: CSR :math:`D^{-1/2} A D^{-1/2}` (rows of isolated nodes empty) and degrees."""
    a = symmetric_csr(num_nodes, u, v)
    deg = np.asarray(a.sum(axis=1)).ravel()
    inv_sqrt = np.zeros(num_nodes)
    np.divide(1.0, np.sqrt(deg), out=inv_sqrt, where=deg > 0)
    s = sp.diags(inv_sqrt) @ a @ sp.diags(inv_sqrt)
    return s.tocsr(), deg


def graph_components(num_nodes: int, u: np.ndarray, v: np.ndarray):
    """Connected components, their sizes and bipartite sides.

    Returns
    -------
    labels : numpy.ndarray
        int64 ``(n,)`` component of each node (numbered in order of their smallest node).
    sizes : numpy.ndarray
        int64 ``(num_components,)``.
    bipartite : numpy.ndarray
        bool ``(num_components,)``; isolated nodes count as not bipartite (no -1 eigenvalue).
    side : numpy.ndarray
        float64 ``(n,)``, +1 / -1 the side of each node in a bipartite component (+1 elsewhere).
    """
    a = symmetric_csr(num_nodes, u, v)
    _, labels = connected_components(a, directed=False)
    # Renumber components by their smallest node, so the numbering is independent of scipy's traversal.
    first = np.full(labels.max() + 1 if num_nodes else 0, num_nodes, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(num_nodes))
    rank = np.empty_like(first)
    rank[np.argsort(first, kind="stable")] = np.arange(first.shape[0])
    labels = rank[labels].astype(np.int64)
    sizes = np.bincount(labels, minlength=first.shape[0]).astype(np.int64)
    # Bipartite double cover: node i -> (i, i + n), edge u-v -> (u, v + n) and (u + n, v). A component is
    # bipartite iff its cover splits in two; the side of i is whether i and the component's first node
    # land in the same half.
    n = num_nodes
    cover = sp.csr_matrix((np.ones(2 * u.shape[0]), (np.concatenate([u, u + n]), np.concatenate([v + n, v]))),
                          shape=(2 * n, 2 * n))
    _, cl = connected_components(cover, directed=False)
    split = cl[:n] != cl[n:]
    root = np.sort(first)  # smallest node of each (renumbered) component
    bipartite = split[root] & (sizes >= 2)
    side = np.where(bipartite[labels] & (cl[:n] != cl[root[labels]]), -1.0, 1.0)
    return labels, sizes, bipartite, side


def _null_vectors(deg: np.ndarray, labels: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    r""":math:`\phi` stacked over components: ``phi[i] = sqrt(d_i / vol(C(i)))`` (0 on isolated nodes)."""
    vol = np.bincount(labels, weights=deg, minlength=sizes.shape[0])
    phi = np.zeros(deg.shape[0])
    np.divide(deg, vol[labels], out=phi, where=deg > 0)
    return np.sqrt(phi)


# ----------------------------------------------------------------------------------------------------
# LapPE
# ----------------------------------------------------------------------------------------------------
def _dense_component_pairs(s: sp.csr_matrix, nodes: np.ndarray, size: int, k: int):
    """Smallest non-zero eigenpairs of equal-size components, batched dense ``eigh``.

    ``nodes``: int64 ``(B, size)`` node ids per component. Yields ``(vals (b, m), vecs (b, size, m))``
    per chunk, m = min(k, size - 1) (or 1 for isolated nodes).
    """
    per_chunk = max(1, _BLOCK_ENTRIES // (size * size))
    for lo in range(0, nodes.shape[0], per_chunk):
        block = nodes[lo:lo + per_chunk]
        b = block.shape[0]
        flat = block.ravel()
        sub = s[flat][:, flat].tocoo()  # block-diagonal: components are disjoint
        dense = np.zeros((b, size, size))
        dense[sub.row // size, sub.row % size, sub.col % size] = sub.data
        lap = np.eye(size)[None] - dense
        vals, vecs = np.linalg.eigh(lap)
        skip = 0 if size == 1 else 1  # one zero eigenvalue per connected component of >= 2 nodes
        m = min(k, size - skip)
        yield vals[:, skip:skip + m], vecs[:, :, skip:skip + m]


def sparse_lap_pe(num_nodes: int, u, v, k: int = 4, tol: float = 1e-10, seed: int = 0,
                  dense_max: int = 256, factor_max: int = DEFAULT_FACTOR_MAX,
                  report=None) -> tuple[np.ndarray, np.ndarray]:
    """LapPE and EigVals of a large graph: the k smallest non-zero eigenpairs of I - D^-1/2 A D^-1/2.

    Parameters
    ----------
    num_nodes : int
        Number of nodes.
    u, v : array_like of int
        Undirected edges (canonicalised: direction, self-loops and multi-edges are ignored).
    k : int
        Number of eigenpairs.
    tol : float
        ARPACK relative residual tolerance for components above ``dense_max`` nodes.
    seed : int
        Seed of ARPACK's start vector.
    dense_max : int
        Components up to this size are solved densely (batched over equal sizes).
    factor_max : int
        Larger components whose grounded Laplacian has at most this many envelope entries are solved by
        shift-invert, the others by Lanczos (:mod:`.eigensolvers`).
    report : optional
        Progress reporter (``update(nodes)``), told the nodes of each component as it is solved.

    Returns
    -------
    eigvecs : numpy.ndarray
        float64 ``(num_nodes, k)``: absolute values of the unit eigenvectors, ascending eigenvalue order,
        zero columns as padding.
    eigvals : numpy.ndarray
        float64 ``(k,)``, ascending, clamped at 0, zero padded.
    """
    u, v = simple_edges(u, v, num_nodes)
    out_vecs = np.zeros((num_nodes, k))
    out_vals = np.zeros(k)
    if num_nodes == 0 or k == 0:
        return out_vecs, out_vals
    s, deg = _normalised_adjacency(num_nodes, u, v)
    labels, sizes, _, _ = graph_components(num_nodes, u, v)
    phi = _null_vectors(deg, labels, sizes)
    members = np.argsort(labels, kind="stable")  # nodes grouped by component, ascending inside
    start = np.concatenate([[0], np.cumsum(sizes)])

    # Candidates from every component: (eigenvalue, component, column, node ids, vector).
    cand_vals, cand_comp, cand_nodes, cand_vecs = [], [], [], []
    comp_ids = np.arange(sizes.shape[0])
    for size in np.unique(sizes[sizes <= dense_max]):
        comps = comp_ids[sizes == size]
        nodes = members[start[comps][:, None] + np.arange(size)[None, :]]
        done = 0
        for vals, vecs in _dense_component_pairs(s, nodes, int(size), k):
            b, m = vals.shape
            for j in range(m):
                cand_vals.append(vals[:, j])
                cand_comp.append(comps[done:done + b])
                cand_nodes.extend(nodes[done:done + b])
                cand_vecs.extend(vecs[:, :, j])
            done += b
    if report is not None:
        report.update(int(sizes[sizes <= dense_max].sum()))
    for c in comp_ids[sizes > dense_max]:
        nodes = members[start[c]:start[c + 1]]
        vals, vecs, solver = component_pairs(s[nodes][:, nodes].tocsr(), deg[nodes], phi[nodes],
                                             min(k, nodes.size - 1), tol, seed, factor_max)
        _LOG.info("LapPE: %s on a %d-node component", solver, nodes.size)
        if report is not None:
            report.update(int(nodes.size))
        cand_vals.append(vals)
        cand_comp.append(np.full(vals.shape[0], c))
        cand_nodes.extend([nodes] * vals.shape[0])
        cand_vecs.extend(vecs.T)

    vals = np.concatenate(cand_vals)
    comp = np.concatenate(cand_comp)
    # Ascending eigenvalue; ties by component (smallest node first) for determinism.
    pick = np.lexsort((comp, vals))[:k]
    for col, idx in enumerate(pick):
        vec = cand_vecs[idx]
        out_vecs[cand_nodes[idx], col] = np.abs(vec) / np.linalg.norm(vec)
        out_vals[col] = max(vals[idx], 0.0)
    return out_vecs, out_vals


# ----------------------------------------------------------------------------------------------------
# RWSE
# ----------------------------------------------------------------------------------------------------
def _check_steps(steps) -> list[int]:
    steps = [int(t) for t in steps]
    if any(t < 0 for t in steps):
        raise ValueError(f"random-walk steps must be >= 0, got {steps}")
    return steps


def _report_share(report, n: int, done: int, size: int, total: int) -> None:
    """Tell ``report`` the nodes' share of work items ``done .. done + size`` out of ``total``."""
    if report is not None:
        report.update(n * (done + size) // total - n * done // total)


def _rwse_exact(s: sp.csr_matrix, steps: list[int], block: int | None = None, report=None) -> np.ndarray:
    """Exact diag(S^k) on blocks of unit vectors: (S^k)_ii = <S^h e_i, S^(k-h) e_i>, h = floor(k/2)."""
    n = s.shape[0]
    kmax = max(steps)
    want = set(steps)
    diag = np.zeros((n, kmax + 1))
    diag[:, 0] = 1.0
    block = block or max(1, min(n, _BLOCK_ENTRIES // max(n, 1) // 2))
    for lo in range(0, n, block):
        idx = np.arange(lo, min(n, lo + block))
        prev = np.zeros((n, idx.size))
        prev[idx, np.arange(idx.size)] = 1.0  # Y_0 = E_B
        for t in range(1, (kmax + 1) // 2 + 1):
            cur = s @ prev  # Y_t
            if 2 * t - 1 in want:
                diag[idx, 2 * t - 1] = np.einsum("ij,ij->j", prev, cur)
            if 2 * t in want:
                diag[idx, 2 * t] = np.einsum("ij,ij->j", cur, cur)
            prev = cur
        _report_share(report, n, lo, idx.size, n)
    return diag[:, steps]


def _exact_small_powers(s: sp.csr_matrix, kmax: int, exact_nnz: int) -> dict[int, np.ndarray]:
    r"""Exact diag(S^k) for the small k reachable with sparse powers S^h of at most ``exact_nnz`` entries.

    Each product ``S^h @ S`` is priced before it runs: its multiply-adds, :math:`\sum_{(i,j) \in S^h}
    \mathrm{nnz}(S_{j\cdot})`, bound the entries of the result. On a hub the first product alone costs
    :math:`\sum_j d_j^2` (a star with 60,000 leaves: 3.6e9, a dense 60,000 x 60,000 block): such products
    are never started, and the steps they would serve go to the estimator. Two powers are alive at a time.
    """
    out = {1: np.asarray(s.diagonal())}
    row_nnz = np.diff(s.indptr).astype(np.float64)
    prev, cur = sp.identity(s.shape[0], format="csr"), s  # S^(h-1), S^h
    h = 1
    while True:
        out[2 * h - 1] = np.asarray(prev.multiply(cur).sum(axis=1)).ravel()
        if 2 * h <= kmax:
            out[2 * h] = np.asarray(cur.multiply(cur).sum(axis=1)).ravel()
        if 2 * h + 1 > kmax:
            break
        work = np.bincount(cur.indices, minlength=s.shape[0]) @ row_nnz  # multiply-adds of cur @ s
        if work > 4 * exact_nnz:
            break
        nxt = (cur @ s).tocsr()
        if nxt.nnz > exact_nnz:
            break
        prev, cur = cur, nxt
        h += 1
    return out


def _rwse_hutchinson(s, deg, labels, sizes, bipartite, side, steps, num_probes, seed, exact_nnz, report=None):
    """Deflated, symmetrically split Hutchinson estimate of diag(S^k) (see module docstring)."""
    n = s.shape[0]
    kmax = max(steps)
    phi = _null_vectors(deg, labels, sizes)
    psi = np.where(bipartite[labels], side * phi, 0.0)
    exact = _exact_small_powers(s, kmax, exact_nnz) if exact_nnz > 0 else {1: np.asarray(s.diagonal())}
    todo = [k for k in steps if k >= 2 and k not in exact]
    diag = np.zeros((n, kmax + 1))
    diag[:, 0] = 1.0
    for k, d in exact.items():
        if k <= kmax:
            diag[:, k] = d
    if todo:
        # Columns phi_C (and psi_C) as sparse n x C matrices: Q x = x - Phi Phi^T x - Psi Psi^T x.
        cols = [sp.csr_matrix((vec, (np.arange(n), labels)), shape=(n, sizes.shape[0])) for vec in (phi, psi)]

        def project(x):
            for c in cols:
                x = x - c @ (c.T @ x)
            return x

        rng = np.random.default_rng(seed)
        acc = np.zeros((n, kmax + 2))
        trivial_even = phi ** 2 + psi ** 2
        trivial_odd = phi ** 2 - psi ** 2
        chunk = max(1, min(num_probes, _BLOCK_ENTRIES // max(n, 1) // 2))
        hi = (max(todo) + 1) // 2
        # R = 0 (stars, complete bipartite graphs: S has eigenvalues +-1 and 0 only) leaves nothing to
        # estimate; one Gaussian probe tells (R z = 0 for Gaussian z means R = 0 with probability 1).
        g = np.random.default_rng(seed + 1).standard_normal((n, 1))
        if np.linalg.norm(s @ project(g)) <= 1e-10 * np.linalg.norm(g):
            num_probes = 0
        for done in range(0, num_probes, chunk):
            z = rng.choice(np.array([-1.0, 1.0]), size=(n, min(chunk, num_probes - done)))
            prev = project(z)
            for t in range(1, hi + 1):
                cur = s @ prev
                acc[:, 2 * t - 1] += np.einsum("ij,ij->i", prev, cur)
                acc[:, 2 * t] += np.einsum("ij,ij->i", cur, cur)
                prev = cur
            _report_share(report, n, done, z.shape[1], num_probes)
        for k in todo:
            # a probability: clipping the (rare, noise-only) excursions below 0 or above 1 only reduces error
            diag[:, k] = np.clip((trivial_even if k % 2 == 0 else trivial_odd) + acc[:, k] / max(num_probes, 1),
                                 0, 1)
    return diag[:, steps]


def sparse_rwse(num_nodes: int, u, v, steps=range(2, 22), method: str = "auto", num_probes: int = 256,
                seed: int = 0, exact_nnz: int | None = None, exact_work: float = 2e8, report=None) -> np.ndarray:
    """Random-walk return probabilities diag((D^-1 A)^k) of a large graph, without dense n x n matrices.

    Parameters
    ----------
    num_nodes : int
        Number of nodes.
    u, v : array_like of int
        Undirected edges (canonicalised: direction, self-loops and multi-edges are ignored).
    steps : iterable of int
        Walk lengths k (>= 0; RWSE uses 2..21).
    method : {"auto", "exact", "hutchinson"}
        See the module docstring; "auto" is exact when ``num_nodes * (nnz(A) + num_nodes) <= exact_work``.
    num_probes : int
        Rademacher probes of the "hutchinson" method.
    seed : int
        Seed of the probes.
    exact_nnz : int, optional
        "hutchinson" computes diag(S^k) exactly from sparse powers S^h with at most this many entries
        (0 switches it off); default ``max(2^22, 16 * num_nodes)``.
    exact_work : float
        Threshold of ``method="auto"``.
    report : optional
        Progress reporter (``update(nodes)``): ``num_nodes`` in all, in shares as blocks or probes finish.

    Returns
    -------
    numpy.ndarray
        float64 ``(num_nodes, len(steps))``; isolated nodes have 0 for every k >= 1.
    """
    steps = _check_steps(steps)
    u, v = simple_edges(u, v, num_nodes)
    if not steps or num_nodes == 0:
        return np.zeros((num_nodes, len(steps)))
    if method == "auto":
        method = "exact" if num_nodes * (2.0 * u.shape[0] + num_nodes) <= exact_work else "hutchinson"
    s, deg = _normalised_adjacency(num_nodes, u, v)
    if exact_nnz is None:
        exact_nnz = max(1 << 22, 16 * num_nodes)
    if method == "exact":
        return _rwse_exact(s, steps, report=report)
    if method == "hutchinson":
        labels, sizes, bipartite, side = graph_components(num_nodes, u, v)
        return _rwse_hutchinson(s, deg, labels, sizes, bipartite, side, steps, int(num_probes), seed,
                                int(exact_nnz), report)
    raise ValueError(f"unknown RWSE method {method!r}; use 'auto', 'exact' or 'hutchinson'")
