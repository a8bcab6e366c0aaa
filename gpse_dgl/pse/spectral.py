# size: most of this file is DenseBatch, whose lazily shared decompositions (sym, sym_low, comb, comb_pinv)
# serve each other; EdgeCollection and SparseGraph are the inputs it is built from.
r"""Shared graph views for the PSE computations: edge collections, dense same-size batches, large graphs.

All PSEs are defined on simple undirected graphs. :class:`EdgeCollection` reduces any input (a list of
DGLGraphs, possibly batched, directed, with self-loops or multi-edges) to that form once, through
:func:`gpse_dgl.utils.graph.simple_edges`: directions are dropped (directed input is symmetrised),
self-loops and multi-edges removed. Node ids and node order are unchanged.

:class:`DenseBatch` holds ``B`` graphs with the same number of nodes ``n`` as dense float64 stacks and
computes, lazily and once, the eigendecompositions the requested PSEs need:

* ``sym``: the symmetric-normalised Laplacian

  .. math:: L_{sym} = I - D^{-1/2} A D^{-1/2}, \qquad L_{sym} = U \Lambda U^\top,

  with :math:`D^{-1/2}_{ii} = 0` for isolated nodes, so an isolated node keeps :math:`(L_{sym})_{ii} = 1`
  (as PyG's ``get_laplacian(normalization="sym")`` builds it) and contributes an eigenvalue 1.
  It serves LapPE and EigVals, and RWSE through the similarity of :math:`P = D^{-1}A` and
  :math:`S = I - L_{sym} = D^{-1/2} A D^{-1/2}`: :math:`P^k = D^{-1/2} S^k D^{1/2}`, hence
  :math:`\mathrm{diag}(P^k) = \mathrm{diag}(S^k) = \sum_j U_{ij}^2 (1 - \lambda_j)^k` (isolated nodes: 0).
* ``sym_low`` / ``sym_low_values``: only the lowest eigenpairs (eigenvalues) of :math:`L_{sym}`, enough for
  the first ``k`` non-zero ones (LapPE, EigVals). Taken from ``sym`` when that is computed anyway or
  when a worker thread precomputes the decompositions (:meth:`DenseBatch.precompute`); otherwise, for
  graphs of at least :data:`PARTIAL_MIN_N` nodes on the CPU, LAPACK's MRRR solver
  (``scipy.linalg.eigh(..., subset_by_index=..., driver="evr")``) computes just those, a fraction of the
  work of a full decomposition; smaller graphs use one batched ``eigh`` / ``eigvalsh``,
  and, when they are bipartite (most molecules), one of half the size (:mod:`.bipartite`).
* ``comb``: the combinatorial Laplacian :math:`L = D - A = V M V^\top`; serves HKdiagSE, and ElstaticPE
  through the pseudo-inverse :math:`L^+ = \sum_{\mu_i \neq 0} \mu_i^{-1} v_i v_i^\top` when it is
  computed anyway.
* ``comb_pinv``: :math:`L^+` without eigenvectors. With :math:`P` the orthogonal projector onto the null
  space of :math:`L` (:math:`P_{ij} = 1/|C|` when nodes ``i`` and ``j`` share the connected component
  :math:`C`, else 0), :math:`L + P` is positive definite and :math:`L^+ = (L + P)^{-1} - P` (``L`` and
  ``P`` commute; ``L + P`` acts as ``L`` on the range of ``L`` and as the identity on its null space).
  One batched Cholesky factorisation and inverse cost about a fifth of a batched ``eigh`` on molecules.
  It equals the eigenvalue-thresholded pseudo-inverse of the reference as long as every non-zero
  eigenvalue is above the threshold :math:`10^{-6}`, which holds for graphs of up to
  :data:`PINV_SOLVE_MAX_N` nodes (the algebraic connectivity of a connected graph is at least
  :math:`4 / (n \cdot \mathrm{diam}) \ge 4 / n^2`); larger graphs use ``comb``.

``torch.linalg.eigh`` on a ``(B, n, n)`` stack runs one LAPACK call per matrix in C, without a Python
loop; that and the batched matmuls that follow are what makes the dense path fast.

:class:`SparseGraph` is one graph above the dense size limit, computed with :mod:`gpse_dgl.pse.sparse`
(no ``n x n`` allocation).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components

from .. import _env  # noqa: F401
from .. import _private
from ..utils.errors import GPSEError
from ..utils.graph import simple_edges
from . import bipartite as _bipartite
from .sparse import sparse_lap_pe, sparse_rwse

__all__ = ["EdgeCollection", "DenseBatch", "SparseGraph"]


@dataclass
class EdgeCollection:
    """The simple undirected edge sets of ``G`` graphs, as one disjoint union with global node ids.

    Attributes
    ----------
    num_nodes : np.ndarray
        int64 ``(G,)``, nodes per graph.
    node_offset : np.ndarray
        int64 ``(G + 1,)``, first global node id of each graph (``node_offset[-1]`` = total nodes).
    u, v : np.ndarray
        int64 ``(E,)``, global end points of each undirected edge once, ``u < v``, sorted by ``u``
        (so also grouped by graph).
    edge_offset : np.ndarray
        int64 ``(G + 1,)``, edges of graph ``g`` are ``u[edge_offset[g]:edge_offset[g + 1]]``.
    """

    num_nodes: np.ndarray
    node_offset: np.ndarray
    u: np.ndarray
    v: np.ndarray
    edge_offset: np.ndarray

    @property
    def num_graphs(self) -> int:
        return int(self.num_nodes.shape[0])

    @property
    def total_nodes(self) -> int:
        return int(self.node_offset[-1])

    @functools.cached_property
    def node_graph(self) -> np.ndarray:
        """int64 ``(N,)``, graph id of every node."""
        return np.repeat(np.arange(self.num_graphs, dtype=np.int64), self.num_nodes)

    @classmethod
    def from_edges(cls, num_nodes, src, dst, check: bool = True) -> "EdgeCollection":
        """Build from per-graph node counts and (possibly directed, non-simple) global edge arrays.

        ``check`` verifies that no edge joins two graphs (skipped for DGL's own disjoint unions).
        """
        num_nodes = np.asarray(num_nodes, dtype=np.int64).reshape(-1)
        node_offset = np.zeros(num_nodes.shape[0] + 1, dtype=np.int64)
        np.cumsum(num_nodes, out=node_offset[1:])
        u, v = simple_edges(src, dst, int(node_offset[-1]))
        if check and u.size and not np.all(np.searchsorted(node_offset, u, "right")
                                 == np.searchsorted(node_offset, v, "right")):
            raise GPSEError("an edge joins two different graphs of the collection")
        edge_offset = np.searchsorted(u, node_offset).astype(np.int64)
        return cls(num_nodes, node_offset, u, v, edge_offset)

    @classmethod
    def from_graphs(cls, graphs) -> "EdgeCollection":
        """Build from a list of DGLGraphs; a batched graph contributes each of its member graphs."""
        fast = _private.union_edges(graphs)
        if fast is not None:
            return cls.from_edges(*fast, check=False)
        # batched or heterogeneous inputs, mixed id types, unknown DGL internals: the public API
        for g in graphs:
            if len(g.ntypes) != 1 or len(g.etypes) != 1:
                raise GPSEError("PSEs are defined on homogeneous graphs; convert heterogeneous graphs "
                                "with dgl.to_homogeneous first")
        src, dst, counts, offset = [], [], [], 0
        for g in graphs:
            s, d = g.edges()
            src.append(s.numpy().astype(np.int64) + offset)
            dst.append(d.numpy().astype(np.int64) + offset)
            counts.append(g.batch_num_nodes().numpy().astype(np.int64))
            offset += g.num_nodes()
        empty = [np.zeros(0, np.int64)]
        return cls.from_edges(np.concatenate(counts or empty), np.concatenate(src or empty),
                              np.concatenate(dst or empty))

    def graph_edges(self, gid: int) -> tuple[np.ndarray, np.ndarray]:
        """Local ``(u, v)`` simple edges of graph ``gid``."""
        lo, hi = self.edge_offset[gid], self.edge_offset[gid + 1]
        off = self.node_offset[gid]
        return self.u[lo:hi] - off, self.v[lo:hi] - off

    @functools.cached_property
    def degree(self) -> np.ndarray:
        """float64 ``(N,)`` degree of every node in the simple graph."""
        total = self.total_nodes
        return (np.bincount(self.u, minlength=total) + np.bincount(self.v, minlength=total)).astype(np.float64)

    @functools.cached_property
    def bipartition(self) -> "_bipartite.Bipartition":
        """Two-colouring of every graph (:func:`gpse_dgl.pse.bipartite.bipartition`), computed once."""
        return _bipartite.bipartition(self.num_nodes, self.u, self.v)

    @functools.cached_property
    def components(self) -> np.ndarray:
        """int64 ``(N,)`` connected-component label of every node (unique across the collection)."""
        total = self.total_nodes
        graph = sp.csr_matrix((np.ones(self.u.shape[0], dtype=np.int8), (self.u, self.v)), shape=(total, total))
        return connected_components(graph, directed=False)[1].astype(np.int64)

    def local_edges(self, gids: np.ndarray):
        """``(batch, local u, local v, global u, global v)`` of the edges of graphs ``gids``.

        Gathered by vectorised range concatenation, no per-graph Python loop.
        """
        counts = self.edge_offset[gids + 1] - self.edge_offset[gids]
        total = int(counts.sum())
        # edge index of every edge of the selected graphs: start of its graph + position inside it
        batch = np.repeat(np.arange(gids.shape[0], dtype=np.int64), counts)
        within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        eidx = self.edge_offset[gids][batch] + within
        off = self.node_offset[gids][batch]
        u, v = self.u[eidx], self.v[eidx]
        return batch, u - off, v - off, u, v

    def dense_adjacency(self, gids: np.ndarray, n: int, device=None) -> torch.Tensor:
        """float64 ``(B, n, n)`` symmetric 0/1 adjacency stack of graphs ``gids`` (all with ``n`` nodes),
        built with one scatter."""
        batch, lu, lv, _, _ = self.local_edges(np.asarray(gids, dtype=np.int64))
        adj = torch.zeros(len(gids), n, n, dtype=torch.float64)  # torch's allocator: see dense_sym_laplacian
        view = adj.numpy()
        view[batch, lu, lv] = 1.0
        view[batch, lv, lu] = 1.0
        return adj if device is None else adj.to(device)

    def dense_sym_laplacian(self, gids: np.ndarray, n: int, device=None, sizes=None) -> torch.Tensor:
        """float64 ``(B, n, n)`` normalised Laplacians ``I - D^-1/2 A D^-1/2`` of graphs ``gids``, straight from
        the edge list (no adjacency stack; isolated nodes keep 1 on the diagonal).

        ``sizes`` (``(B,)``, each ``<= n``): graphs with fewer nodes are padded with nodes that have
        :data:`PAD_DIAGONAL` on the diagonal and nothing else: an eigenvalue above the spectrum (which
        lies in [0, 2]) whose eigenvectors live on the padding alone."""
        batch, lu, lv, u, v = self.local_edges(np.asarray(gids, dtype=np.int64))
        weight = -1.0 / np.sqrt(self.degree[u] * self.degree[v])
        # filled through a numpy view of a torch buffer, not np.zeros: torch aligns every buffer to 64
        # bytes, so LAPACK sees the same memory layout whatever the batch (see pse.laplacian)
        lap = torch.zeros(len(gids), n, n, dtype=torch.float64)
        view = lap.numpy()
        view[batch, lu, lv] = weight
        view[batch, lv, lu] = weight
        diagonal = view.reshape(len(gids), n * n)[:, ::n + 1]
        diagonal[...] = 1.0
        if sizes is not None:
            diagonal[np.arange(n) >= np.asarray(sizes)[:, None]] = PAD_DIAGONAL
        return lap if device is None else lap.to(device)


#: Up to this many nodes, ``comb_pinv`` comes from a Cholesky factorisation instead of eigenpairs.
PINV_SOLVE_MAX_N = 1000
#: From this many nodes on (CPU), LapPE / EigVals without RWSE use the partial MRRR eigensolver.
PARTIAL_MIN_N = 64
#: Below this many nodes, LapPE / EigVals (without RWSE) solve bipartite graphs through their half-size Gram
#: matrix (:mod:`.bipartite`), and graphs of nearby sizes share padded batches (:mod:`.compute`).
GRAM_MAX_N = 64
#: Padding eigenvalue of partial results (above the spectrum of L_sym, which lies in [0, 2]).
_PAD_EIGVAL = _bipartite.PAD_EIGVAL
#: Diagonal entry of the padding nodes of padded ``L_sym`` stacks (an eigenvalue above the spectrum).
PAD_DIAGONAL = _bipartite.PAD_EIGVAL


def lowest_eigenpairs(mat: np.ndarray, k: int, zero_tol: float, cluster_tol: float, vectors: bool = True):
    """Lowest eigenpairs of a symmetric ``(n, n)`` matrix, enough for its first ``k`` non-zero eigenvalues.

    Computes the ``m`` smallest eigenpairs with LAPACK's MRRR driver and grows ``m`` until it covers the
    zero eigenvalues (``|lambda| < zero_tol``), ``k`` more, and the end of the eigenvalue cluster
    (consecutive gaps ``< cluster_tol``) that contains the last of those, so repeated eigenvalues are
    never cut (see :mod:`gpse_dgl.pse.laplacian`). Returns ``(lam (m,), vec (n, m) or None)``.
    """
    n = mat.shape[0]
    m = min(n, k + 4)
    while True:
        res = scipy.linalg.eigh(mat, subset_by_index=[0, m - 1], driver="evr", eigvals_only=not vectors,
                                check_finite=False)
        lam, vec = (res, None) if not vectors else res
        last = int((np.abs(lam) < zero_tol).sum()) + k - 1
        if m == n or (last + 1 < m and np.any(np.diff(lam[last:]) >= cluster_tol)):
            return lam, vec
        m = min(n, 2 * m + last)


class DenseBatch:
    """``B`` graphs with ``n`` nodes each, as float64 dense stacks, with lazily shared decompositions.

    Parameters
    ----------
    adj : torch.Tensor
        float64 ``(B, n, n)`` symmetric 0/1 adjacency without self-loops.
    needs : set of str
        Decompositions the requested PSEs read (``"sym"``, ``"sym_low"``, ``"sym_low_values"``,
        ``"comb"``, ``"comb_pinv"``). A cheaper one is served from a more complete one that is needed
        anyway, so each Laplacian is decomposed at most once per batch.
    """

    def __init__(self, adj: torch.Tensor, needs=()):
        self.adj = adj  # shadows the lazy ``adj`` property below
        self._shape = (adj.shape[0], adj.shape[-1])
        self._source = None  # (collection, gids, device) of from_collection()
        self.sizes = None  # per-graph node counts of a padded batch (from_collection(sizes=...))
        self.needs = frozenset(needs)
        self._low = {}
        self._ready = {}
        self._pending = None  # jobs built by prepare(); None: not prepared
        self._precomputed = False

    @classmethod
    def from_collection(cls, collection: EdgeCollection, gids: np.ndarray, n: int, needs=(),
                        device=None, sizes=None) -> "DenseBatch":
        """The graphs ``gids`` (all with ``n`` nodes) of ``collection``. Dense matrices are built from the
        edge list when first read: PSEs that only need ``L_sym`` (LapPE, EigVals) never build ``A``.

        ``sizes``: a padded batch of graphs with ``sizes[b] <= n`` nodes. Only ``L_sym`` and its lowest
        eigenpairs (``sym_low`` / ``sym_low_values``) are defined for it; see ``PSESpec.padded``.
        """
        batch = cls(torch.empty(len(gids), 0, 0), needs)
        del batch.adj  # built on first use instead
        batch._shape = (len(gids), int(n))
        batch._source = (collection, gids, device)
        if sizes is not None:
            if not set(needs) <= {"sym_low", "sym_low_values"}:
                raise ValueError(f"padded batches serve sym_low / sym_low_values only, not {sorted(needs)}")
            batch.sizes = np.asarray(sizes, dtype=np.int64)
        return batch

    @property
    def node_counts(self) -> np.ndarray:
        """int64 ``(B,)`` real nodes of every graph (``n`` unless the batch is padded)."""
        return self.sizes if self.sizes is not None else np.full(self.batch_size, self.n, dtype=np.int64)

    @functools.cached_property
    def adj(self) -> torch.Tensor:
        """float64 ``(B, n, n)`` adjacency (given to the constructor, or built by :meth:`from_collection`)."""
        if self.sizes is not None:
            raise ValueError("a padded batch has no adjacency stack (only L_sym is defined for it)")
        collection, gids, device = self._source
        return collection.dense_adjacency(gids, self.n, device=device)

    def _jobs(self) -> list:
        """``(key, fn, matrices)`` of the decompositions :meth:`precompute` runs (see there)."""
        jobs = []
        if "sym" in self.needs:
            jobs.append(("sym", torch.linalg.eigh, (self.sym_matrix,)))
        elif self._gram_split is not None and self.needs & {"sym_low", "sym_low_values"}:
            jobs += self._gram_split.jobs(vectors="sym_low" in self.needs)
        elif "sym_low" in self.needs:  # all eigenpairs: off the main thread, the partial solver's gain is moot
            jobs.append(("sym_low", torch.linalg.eigh, (self.sym_matrix,)))
        elif "sym_low_values" in self.needs:
            jobs.append(("sym_low_values", torch.linalg.eigvalsh, (self.sym_matrix,)))
        if "comb" in self.needs:
            jobs.append(("comb", torch.linalg.eigh, (self.comb_matrix,)))
        elif "comb_pinv" in self.needs and self.n <= PINV_SOLVE_MAX_N:
            jobs.append(("comb_pinv", _pinv_by_cholesky, (self.comb_matrix, self.null_projector)))
        return jobs

    def prepare(self) -> "DenseBatch":
        """Build the matrices that :meth:`precompute` decomposes (on the calling thread). Returns ``self``."""
        self._pending = self._jobs()
        return self

    def precompute(self) -> "DenseBatch":
        """Run the decompositions this batch needs now and keep them for the properties below.

        Meant for a worker thread after :meth:`prepare` ran on the main one: all small, GIL-bound tensor
        work (building matrices, post-processing) then stays on one thread while LAPACK, which releases
        the GIL, runs on the others. Runs once; later calls return at once. Returns ``self``.
        """
        if self._precomputed:
            return self
        for key, fn, args in (self._jobs() if self._pending is None else self._pending):
            self._ready[key] = fn(*args)
        self._pending, self._precomputed = [], True
        return self

    def _result(self, key: str, fn, *args):
        """The precomputed result ``key`` if there is one, else ``fn(*args)`` computed now."""
        ready = self._ready.pop(key, None)
        return ready if ready is not None else fn(*args)

    @property
    def batch_size(self) -> int:
        return self._shape[0]

    @property
    def n(self) -> int:
        return self._shape[1]

    @functools.cached_property
    def deg(self) -> torch.Tensor:
        """``(B, n)`` node degrees."""
        return self.adj.sum(-1)

    @functools.cached_property
    def inv_deg(self) -> torch.Tensor:
        """``(B, n)`` 1 / degree, 0 for isolated nodes."""
        d = self.deg
        return torch.where(d > 0, 1.0 / d.clamp_min(1.0), torch.zeros_like(d))

    @functools.cached_property
    def sym_matrix(self) -> torch.Tensor:
        """``(B, n, n)`` normalised Laplacian I - D^-1/2 A D^-1/2 (isolated nodes keep 1 on the diagonal)."""
        if self._source is not None:  # from_collection(): straight from the edges (whatever was built before)
            collection, gids, device = self._source
            return collection.dense_sym_laplacian(gids, self.n, device=device, sizes=self.sizes)
        s = torch.sqrt(self.inv_deg)
        lap = -(s.unsqueeze(-1) * self.adj * s.unsqueeze(-2))
        lap.diagonal(dim1=-2, dim2=-1).add_(1.0)
        return lap

    @functools.cached_property
    def sym(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Ascending eigenvalues ``(B, n)`` and orthonormal eigenvectors ``(B, n, n)`` (columns) of L_sym."""
        return self._result("sym", torch.linalg.eigh, self.sym_matrix)

    def sym_lowest(self, k: int, zero_tol: float, cluster_tol: float, vectors: bool = True):
        """The lowest eigenpairs of L_sym, enough for the first ``k`` non-zero eigenvalues of every graph.

        Returns ``(lam (B, m), vec (B, n, m))`` (``vec`` None when ``vectors`` is False), ascending, with
        ``m <= n``. Graphs needing fewer than ``m`` pairs are padded with eigenvalue 3 (outside the
        spectrum) and zero vectors; padding lies beyond every graph's kept eigenpairs and their cluster.
        """
        if "sym" in self.needs or "sym" in self.__dict__:
            lam, vec = self.sym
            return lam, (vec if vectors else None)
        if not vectors and "sym_low" in self.needs:
            return self.sym_lowest(k, zero_tol, cluster_tol, vectors=True)[0], None
        key = (k, zero_tol, cluster_tol, vectors)
        if key not in self._low:
            self._low[key] = self._compute_lowest(k, zero_tol, cluster_tol, vectors)
        return self._low[key]

    @functools.cached_property
    def _gram_split(self):
        """:class:`.bipartite.GramSplit` of this batch when LapPE / EigVals take the half-size path for
        its bipartite graphs; None when the path does not apply: no bipartite graph with at least
        ``bipartite.MIN_GRAM_SIZE`` nodes on its smaller side, matrices not built from a collection,
        not on the CPU, or ``n >= GRAM_MAX_N``."""
        if self._source is None or self.n >= GRAM_MAX_N:
            return None
        collection, gids, device = self._source
        if device is not None and torch.device(device).type != "cpu":
            return None
        split = _bipartite.GramSplit(collection, gids, self.n, self.sizes)
        return split if split.rows.any() else None

    def _compute_lowest(self, k, zero_tol, cluster_tol, vectors):
        if self._gram_split is not None:
            return self._gram_split.lowest(self._result, k, zero_tol, cluster_tol, vectors)
        mat = self.sym_matrix
        if self.n < PARTIAL_MIN_N or mat.device.type != "cpu" or "sym_low" in self._ready \
                or "sym_low_values" in self._ready:
            if vectors:
                return self._result("sym_low", torch.linalg.eigh, mat)
            return self._result("sym_low_values", torch.linalg.eigvalsh, mat), None
        parts = [lowest_eigenpairs(m, k, zero_tol, cluster_tol, vectors) for m in mat.numpy()]
        width = max(p[0].shape[0] for p in parts)
        lam = torch.full((len(parts), width), _PAD_EIGVAL, dtype=mat.dtype)
        vec = torch.zeros(len(parts), self.n, width, dtype=mat.dtype) if vectors else None
        for b, (val, v) in enumerate(parts):
            lam[b, :val.shape[0]] = torch.from_numpy(val)
            if vectors:
                vec[b, :, :val.shape[0]] = torch.from_numpy(v)
        return lam, vec

    @functools.cached_property
    def comb_matrix(self) -> torch.Tensor:
        """``(B, n, n)`` combinatorial Laplacian L = D - A."""
        lap = -self.adj
        lap.diagonal(dim1=-2, dim2=-1).add_(self.deg)
        return lap

    @functools.cached_property
    def comb(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Ascending eigenvalues ``(B, n)`` and orthonormal eigenvectors ``(B, n, n)`` of L = D - A."""
        return self._result("comb", torch.linalg.eigh, self.comb_matrix)

    @functools.cached_property
    def components(self) -> torch.Tensor:
        """int64 ``(B, n)`` connected-component label of every node (labels unique across the batch)."""
        if self._source is not None:  # one pass over the whole collection serves every batch
            collection, gids, device = self._source
            rows = collection.node_offset[np.asarray(gids, dtype=np.int64)][:, None] + np.arange(self.n)
            return torch.from_numpy(collection.components[rows]).to(device)
        size = self.batch_size * self.n
        b, i, j = torch.nonzero(self.adj.cpu(), as_tuple=True)
        row = (b * self.n + i).numpy()
        graph = sp.csr_matrix((np.ones(row.shape[0], dtype=np.int8), (row, (b * self.n + j).numpy())),
                              shape=(size, size))
        labels = connected_components(graph, directed=False)[1]
        return torch.from_numpy(labels.astype(np.int64)).view(self.batch_size, self.n).to(self.adj.device)

    @functools.cached_property
    def null_projector(self) -> torch.Tensor:
        """``(B, n, n)`` projector onto the null space of L: ``1 / |C|`` inside each component ``C``, else 0."""
        labels = self.components
        sizes = torch.bincount(labels.reshape(-1)).to(self.adj.dtype)[labels]  # (B, n) size of own component
        same = labels.unsqueeze(-1) == labels.unsqueeze(-2)
        return same.to(self.adj.dtype) / sizes.unsqueeze(-1)

    def comb_pinv(self, zero_tol: float) -> torch.Tensor:
        """``(B, n, n)`` pseudo-inverse of L from the eigenpairs with eigenvalue ``>= zero_tol``.

        Taken from ``comb`` when that is needed anyway (or the graphs exceed :data:`PINV_SOLVE_MAX_N`
        nodes), otherwise from one Cholesky factorisation of ``L + P`` (module docstring).
        """
        if "comb" in self.needs or "comb" in self.__dict__ or self.n > PINV_SOLVE_MAX_N:
            mu, vec = self.comb
            inv = torch.where(mu >= zero_tol, 1.0 / mu.clamp_min(zero_tol), torch.zeros_like(mu))
            return torch.matmul(vec * inv.unsqueeze(-2), vec.transpose(-1, -2))
        return self._result("comb_pinv", _pinv_by_cholesky, self.comb_matrix, self.null_projector)


def _pinv_by_cholesky(lap: torch.Tensor, proj: torch.Tensor) -> torch.Tensor:
    """``(L + P)^-1 - P`` for a Laplacian stack ``L`` and its null-space projectors ``P``."""
    return torch.cholesky_inverse(torch.linalg.cholesky(lap + proj)) - proj


class SparseGraph:
    """One graph above the dense size limit; sparse eigensolvers and matrix-vector products only.

    Parameters
    ----------
    num_nodes : int
    u, v : np.ndarray
        Local simple edges (``u < v``).
    """

    def __init__(self, num_nodes: int, u: np.ndarray, v: np.ndarray, report=None):
        self.n = int(num_nodes)
        self.u = u
        self.v = v
        self.report = report  # progress reporter told the nodes each computation has finished

    @functools.cached_property
    def lap_pe(self) -> tuple[np.ndarray, np.ndarray]:
        """``(|eigvecs| (n, 4), eigvals (4,))`` of L_sym from :func:`gpse_dgl.pse.sparse.sparse_lap_pe`."""
        return sparse_lap_pe(self.n, self.u, self.v, k=4, report=self.report)

    def rwse(self, steps) -> np.ndarray:
        """``(n, len(steps))`` random-walk return probabilities from :func:`gpse_dgl.pse.sparse.sparse_rwse`."""
        return sparse_rwse(self.n, self.u, self.v, steps=steps, report=self.report)
