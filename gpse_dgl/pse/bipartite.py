r"""The lowest eigenpairs of :math:`L_{sym}` of bipartite graphs from an eigenproblem of half the size.

Most molecules (80 % of the embedded set) and all trees and even cycles are bipartite. With the nodes of
a bipartite graph split into sides :math:`P` (``p`` nodes) and :math:`Q`,

.. math::
    S = D^{-1/2} A D^{-1/2} = \begin{pmatrix} 0 & B \\ B^\top & 0 \end{pmatrix}, \qquad
    L_{sym} = I - S, \qquad G = B B^\top = U \,\mathrm{diag}(\sigma^2)\, U^\top \quad (p \times p).

For every singular value :math:`\sigma_i > 0` of ``B``, :math:`x_i = (u_i, B^\top u_i / \sigma_i) / \sqrt 2`
is a unit eigenvector of ``S`` with eigenvalue :math:`\sigma_i`, i.e. of :math:`L_{sym}` with eigenvalue
:math:`1 - \sigma_i`. The spectrum of :math:`L_{sym}` is :math:`\{1 - \sigma_i\} \cup \{1 + \sigma_i\} \cup
\{1, \dots\}`, so the ``p`` values :math:`1 - \sigma_i` (``sigma_i^2`` the eigenvalues of ``G``, in
descending order) are exactly its ``p`` lowest eigenvalues. LapPE and EigVals need only the lowest few,
so one ``p x p`` eigendecomposition (``P`` the smaller side of every connected component, ``p <= n / 2``)
replaces the ``n x n`` one: an eighth of the arithmetic.

Exactness. The Gram pairs are used for a graph only when they cover what LapPE / EigVals read: the zero
eigenvalues, the ``k`` after them and the whole cluster of (numerically) repeated eigenvalues containing
the last of those (:func:`needed_columns`), each with ``sigma >= SIGMA_MIN`` (so ``B^T u / sigma`` loses
no accuracy, and eigenvalue 1, which also has eigenvectors from the null space of ``B``, is never taken
from here). Other graphs (mostly tiny or star-like ones) take the full decomposition. The canonical basis
of repeated eigenvalues (:mod:`.laplacian`) is a function of the eigenspace alone, so it is the same from
either decomposition.

Several graphs of one size are solved in one batched call: their Gram matrices are padded to the largest
``p`` with eigenvalue -1 on the padding, below every :math:`\sigma^2 \ge 0`, so it never mixes with a
real pair. Only the eigendecompositions run on worker threads (:meth:`GramSplit.jobs`); building the
matrices and turning pairs into eigenvectors happen on the calling thread (see :mod:`.compute`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components

#: Smallest singular value taken from the Gram problem (larger gaps to the eigenvalue-1 block than this).
SIGMA_MIN = 1e-2
#: Eigenvalue marking padding columns of partial results (above the spectrum of L_sym, which is in [0, 2]).
PAD_EIGVAL = 3.0
#: Bipartite graphs with fewer Gram-side nodes go straight to the full decomposition: the Gram pairs
#: cannot cover a zero eigenvalue and the 4 after it (LapPE's k) anyway.
MIN_GRAM_SIZE = 5
_GRAM_PAD = -1.0  # eigenvalue of the padding rows of a Gram stack (below every sigma^2)
_SQRT_HALF = 0.7071067811865476


@dataclass(frozen=True)
class Bipartition:
    """Two-colouring of every graph of an edge collection.

    Attributes
    ----------
    gram_side : np.ndarray
        bool ``(N,)``: in a bipartite graph, the node is on the smaller side of its connected component
        (ties: a fixed choice). False in non-bipartite graphs and for isolated nodes.
    slot : np.ndarray
        int64 ``(N,)``: rank of a ``gram_side`` node among the ``gram_side`` nodes of its graph (node
        order); undefined elsewhere.
    bipartite : np.ndarray
        bool ``(G,)``: every connected component of the graph is bipartite (graphs without edges too).
    gram_size : np.ndarray
        int64 ``(G,)``: number of ``gram_side`` nodes of each graph (``p``).
    """

    gram_side: np.ndarray
    slot: np.ndarray
    bipartite: np.ndarray
    gram_size: np.ndarray


def bipartition(num_nodes: np.ndarray, u: np.ndarray, v: np.ndarray) -> Bipartition:
    """Two-colour all graphs of a disjoint union at once (simple edges ``u < v``, sorted by ``u``).

    One connected-components pass over the bipartite double cover (nodes ``(i, 0)`` and ``(i, 1)``,
    edges ``(i, 0)-(j, 1)`` and ``(i, 1)-(j, 0)`` for every edge ``i-j``): a connected component is
    bipartite exactly when ``(i, 0)`` and ``(i, 1)`` of its nodes fall in different components of the
    cover, and then the cover component of ``(i, 0)`` is the colour of ``i``.
    """
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    total = int(num_nodes.sum())
    # rows u (sorted) then u + total (sorted): CSR without a sort; directed=False adds the reverse edges
    rows = np.concatenate([u, u + total])
    indptr = np.zeros(2 * total + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=2 * total), out=indptr[1:])
    cover = sp.csr_matrix((np.ones(rows.shape[0], dtype=np.int8), np.concatenate([v + total, v]), indptr),
                          shape=(2 * total, 2 * total))
    labels = connected_components(cover, directed=False)[1]
    own, other = labels[:total], labels[total:]
    odd = own == other  # the node's component has an odd cycle
    size = np.bincount(own, minlength=2 * total)  # nodes per colour class
    smaller = (size[own] < size[other]) | ((size[own] == size[other]) & (own < other))
    graph_of_node = np.repeat(np.arange(num_nodes.shape[0], dtype=np.int64), num_nodes)
    bipartite = np.bincount(graph_of_node, weights=odd, minlength=num_nodes.shape[0]) == 0
    gram_side = smaller & bipartite[graph_of_node]
    counts = np.cumsum(gram_side)
    first = np.concatenate([[0], counts])[np.concatenate([[0], np.cumsum(num_nodes)])[:-1]]
    slot = counts - 1 - np.repeat(first, num_nodes)
    gram_size = np.bincount(graph_of_node, weights=gram_side, minlength=num_nodes.shape[0]).astype(np.int64)
    return Bipartition(gram_side, slot, bipartite, gram_size)


def _last_kept(lam: np.ndarray, k: int, zero_tol: float) -> np.ndarray:
    """int64 ``(B,)``: column of the last eigenvalue LapPE / EigVals keep (zeros first, then ``k``)."""
    return (np.abs(lam) < zero_tol).sum(1) + (k - 1)


def needed_columns(lam: np.ndarray, k: int, zero_tol: float, cluster_tol: float) -> np.ndarray:
    """int64 ``(B,)``: how many of the lowest eigenvalues ``lam`` (``(B, m)``, ascending) LapPE / EigVals
    read: the zero ones, ``k`` more and the rest of the cluster of the last of those (consecutive gaps
    below ``cluster_tol``). At most ``m``; ``m`` means "all" when fewer than that many are available."""
    return _needed(lam, _last_kept(lam, k, zero_tol), cluster_tol)


def _needed(lam: np.ndarray, last: np.ndarray, cluster_tol: float) -> np.ndarray:
    m = lam.shape[1]
    ends = np.empty(lam.shape, dtype=bool)  # ends[b, j]: the value after column j starts a new cluster
    np.greater_equal(lam[:, 1:] - lam[:, :-1], cluster_tol, out=ends[:, :-1])
    ends[:, -1] = True
    ends &= np.arange(m) >= last[:, None]
    return np.where(last < m, ends.argmax(1) + 1, m)


def uncovered(lam: np.ndarray, p: np.ndarray, k: int, zero_tol: float, cluster_tol: float) -> np.ndarray:
    """bool ``(B,)``: graphs whose Gram eigenvalues ``lam`` (``(B, m)`` ascending, padded with
    :data:`PAD_EIGVAL` past ``p``) miss some of the :func:`needed_columns`, or reach one with
    ``sigma < SIGMA_MIN``; those graphs need the full decomposition."""
    return _coverage(lam, p, k, zero_tol, cluster_tol)[0]


def _coverage(lam, p, k, zero_tol, cluster_tol):
    """``(uncovered (B,), needed columns (B,))``; see :func:`uncovered`."""
    if lam.shape[1] == 0:
        return np.ones(lam.shape[0], dtype=bool), np.zeros(lam.shape[0], dtype=np.int64)
    last = _last_kept(lam, k, zero_tol)
    need = _needed(lam, last, cluster_tol)
    low_enough = lam[np.arange(lam.shape[0]), np.maximum(need - 1, 0)] <= 1.0 - SIGMA_MIN
    return ~((last < p) & low_enough), need


class GramSplit:
    """The graphs of a same-size batch as Gram problems (bipartite ones) and full ones (the others).

    Parameters
    ----------
    collection : EdgeCollection
    gids : np.ndarray
        Graph ids, all with ``n`` nodes (or ``sizes[b] <= n`` of them: a padded batch).
    n : int
    sizes : np.ndarray, optional

    Attributes
    ----------
    rows : np.ndarray
        bool ``(B,)``: graphs solved through their Gram matrix (bipartite, with at least
        :data:`MIN_GRAM_SIZE` Gram-side nodes).
    """

    def __init__(self, collection, gids: np.ndarray, n: int, sizes=None):
        part = collection.bipartition
        self.collection, self.gids, self.n = collection, np.asarray(gids, dtype=np.int64), int(n)
        self.sizes = None if sizes is None else np.asarray(sizes, dtype=np.int64)
        self.rows = part.bipartite[self.gids] & (part.gram_size[self.gids] >= MIN_GRAM_SIZE)
        self.p = part.gram_size[self.gids[self.rows]]
        self._part = part
        self._gram = self._others = None

    def prepare(self) -> None:
        """Build the matrices (calling thread): the Gram stack of the bipartite graphs and ``L_sym`` of
        the others."""
        coll, n, part = self.collection, self.n, self._part
        gids = self.gids[self.rows]
        p_max = int(self.p.max())
        batch, lu, lv, u, v = coll.local_edges(gids)
        on_u = part.gram_side[u]  # each edge has exactly one end on the Gram side
        slot = np.where(on_u, part.slot[u], part.slot[v])
        # rows of B, written as rows of S over all n columns: (B, p_max, n), zero padding rows
        other = np.where(on_u, lv, lu)
        weight = 1.0 / np.sqrt(coll.degree[u] * coll.degree[v])
        s_rows = np.zeros((len(gids), p_max, n))
        s_rows[batch, slot, other] = weight
        # numpy's stacked matmul has less per-call overhead than torch.bmm for these small matrices (as for
        # _vectors'); its output goes to a buffer from torch's allocator, whose 64-byte alignment keeps
        # LAPACK's rounding independent of the batch (see docs/ARCHITECTURE.md)
        self._gram = torch.empty(len(gids), p_max, p_max, dtype=torch.float64)
        gram = np.matmul(s_rows, s_rows.transpose(0, 2, 1), out=self._gram.numpy())
        self._s_rows = s_rows  # kept for B^T u in _vectors
        self.real = np.arange(p_max) < self.p[:, None]  # (B, p_max): the slot holds a node
        pad_b, pad_i = np.nonzero(~self.real)
        gram[pad_b, pad_i, pad_i] = _GRAM_PAD  # the diagonal of padding slots
        # local id of the node in every slot: Gram-side nodes first, in node order (padding: others)
        nodes = coll.node_offset[gids][:, None] + np.arange(n)
        if self.sizes is None:
            side = part.gram_side[nodes]
        else:  # padding nodes are not on the Gram side (and their ids would run into the next graph)
            present = np.arange(n) < self.sizes[self.rows][:, None]
            side = part.gram_side[np.where(present, nodes, 0)] & present
        self.slot_node = np.argsort(~side, axis=1, kind="stable")[:, :p_max]
        others = self.gids[~self.rows]
        self._others = (coll.dense_sym_laplacian(others, n, sizes=self._sizes(~self.rows))
                        if others.size else None)

    def _sizes(self, mask: np.ndarray):
        return None if self.sizes is None else self.sizes[mask]

    def jobs(self, vectors: bool) -> list:
        """``(key, fn, args)`` of the decompositions (pure LAPACK calls, fine for worker threads)."""
        if self._gram is None:
            self.prepare()
        solver = torch.linalg.eigh if vectors else torch.linalg.eigvalsh
        jobs = [("gram", solver, (self._gram,))]
        if self._others is not None:
            jobs.append(("others", solver, (self._others,)))
        return jobs

    def lowest(self, solve, k: int, zero_tol: float, cluster_tol: float, vectors: bool):
        """``(lam (B, m), vec (B, n, m) or None)``: the lowest eigenpairs of every graph, ascending, at least
        as many as LapPE / EigVals read (:func:`needed_columns`); padded with :data:`PAD_EIGVAL` and zero
        vectors.

        ``solve(key, fn, *args)`` returns a job's result (precomputed on a worker, or computed now).
        """
        results = {key: solve(key, fn, *args) for key, fn, args in self.jobs(vectors)}
        gram = results["gram"]
        mu = (gram[0] if vectors else gram).numpy()[:, ::-1]  # descending sigma^2; padding (-1) last
        lam = 1.0 - np.sqrt(np.maximum(mu, 0.0))  # ascending eigenvalues of L_sym
        lam[~self.real] = PAD_EIGVAL
        redo, need = _coverage(lam, self.p, k, zero_tol, cluster_tol)
        keep = np.flatnonzero(~redo)
        full = [(np.flatnonzero(~self.rows), results["others"])] if self._others is not None else []
        if redo.any():  # small or star-like bipartite graphs: the full decomposition, here
            index = np.flatnonzero(self.rows)[redo]
            matrix = self.collection.dense_sym_laplacian(self.gids[index], self.n, sizes=self._sizes(index))
            full.append((index, torch.linalg.eigh(matrix) if vectors else torch.linalg.eigvalsh(matrix)))
        m_gram = int(need[keep].max()) if keep.size else 0  # columns the Gram-path graphs need
        m = self.n if full else m_gram
        lam_all = torch.full((len(self.gids), m), PAD_EIGVAL, dtype=torch.float64)
        vec_all = torch.zeros(len(self.gids), self.n, m, dtype=torch.float64) if vectors else None
        gram_rows = np.flatnonzero(self.rows)[keep]
        lam_all.numpy()[gram_rows, :m_gram] = lam[keep, :m_gram]
        if vectors and keep.size:
            vec_all.numpy()[gram_rows, :, :m_gram] = self._vectors(gram[1].numpy(), lam, keep, m_gram)
        for index, value in full:
            rows = torch.from_numpy(index)
            if vectors:
                lam_all[rows], vec_all[rows] = value
            else:
                lam_all[rows] = value
        return lam_all, vec_all

    def _vectors(self, u: np.ndarray, lam: np.ndarray, keep: np.ndarray, m: int) -> np.ndarray:
        """Unit eigenvectors ``(len(keep), n, m)`` of the first ``m`` Gram pairs of graphs ``keep``."""
        x = u[:, :, ::-1][:, :, :m][keep] * self.real[keep][:, :, None]  # (K, p_max, m); padding rows 0
        # the 1/sqrt(2) of the unit eigenvector folded into both sides
        scale = _SQRT_HALF / np.maximum(1.0 - lam[keep, :m], SIGMA_MIN)  # tiny sigma: never read
        # other side: B^T x / sigma, with the rows of B stored as rows of S over all n nodes (one stacked matmul)
        s_rows = self._s_rows if keep.size == self._s_rows.shape[0] else self._s_rows[keep]
        vec = np.matmul(s_rows.transpose(0, 2, 1), x)
        vec *= scale[:, None, :]
        row, col = np.nonzero(self.real[keep])
        vec[row, self.slot_node[keep][row, col], :] = x[row, col, :] * _SQRT_HALF  # the Gram side: x
        return vec
