r"""Laplacian eigenvector positional encodings (LapPE, node level) and eigenvalues (EigVals, graph level).

With the symmetric-normalised Laplacian :math:`L_{sym} = I - D^{-1/2} A D^{-1/2} = U \Lambda U^\top`
(eigenvalues ascending; isolated nodes keep :math:`(L_{sym})_{ii} = 1`, see :mod:`.spectral`):

* drop the zero eigenvalues, :math:`|\lambda| < 10^{-6}` (their number is the number of connected
  components that have an edge);
* keep the next ``K = 4`` eigenpairs in ascending order;
* LapPE: each kept eigenvector L2-normalised, then absolute value, ``(n, 4)``;
* EigVals: the kept eigenvalues clamped at 0, ``(4,)``.

Graphs with fewer than 4 non-zero eigenvalues are padded with 0 (the reference pads with NaN and turns
NaN into 0 later). One node: :math:`L_{sym} = [1]`, so LapPE ``[1, 0, 0, 0]`` and EigVals ``[1, 0, 0, 0]``.

Repeated eigenvalues (about 15 % of molecules have one among their 4 kept eigenvalues, from symmetry):
their eigenvectors are only defined up to a rotation inside the eigenspace. The reference returns whatever
LAPACK returns, which changes with the BLAS build, the dtype and even the memory alignment of the matrix
(so, in a batched solver, with the other graphs of the batch). The dense path here returns a canonical
basis instead: for each repeated eigenvalue among the kept ones (eigenvalues closer than ``1e-8`` are one
cluster), the eigenspace projector :math:`\Pi = U_c U_c^\top` is formed and its columns are
Gram-Schmidt-orthonormalised in node order (columns with residual norm below ``1e-5`` skipped). This is
still an orthonormal eigenbasis, so it satisfies the definition, and LapPE becomes a deterministic
function of the labelled graph: the same for one graph alone, in any batch, chunking or BLAS. (Like any
basis choice it depends on node order; permuting nodes permutes the values only for simple eigenvalues.)
The sparse path (graphs above ``dense_limit``) does not canonicalise.
"""
from __future__ import annotations

import numpy as np
import torch

K = 4
ZERO_TOL = 1e-6  # |lambda| below this counts as a zero eigenvalue (reference EPS)
CLUSTER_TOL = 1e-8  # eigenvalues closer than this form one (numerically repeated) eigenvalue
RESIDUAL_TOL = 1e-5  # Gram-Schmidt skips projector columns whose residual norm is below this

LAPPE_DESCRIPTION = "|eigenvectors| of the 4 smallest non-zero eigenvalues of I - D^-1/2 A D^-1/2"
EIGVALS_DESCRIPTION = "4 smallest non-zero eigenvalues of I - D^-1/2 A D^-1/2 (graph level)"


def _kept_index(lam: np.ndarray, n, k: int = K) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices ``(B, k)`` into ``lam`` of the first ``k`` eigenvalues after the zero ones, and their
    validity mask.

    ``lam`` ``(B, m)`` holds the ``m <= n`` lowest eigenvalues of graphs with ``n`` nodes (an int, or
    ``(B, 1)`` node counts for a padded batch); when ``m < n`` it covers every kept index, so an index is
    invalid (padding) only when it reaches ``n``. Flat indices
    (``b * m + j``) because one fancy index into the raveled array is several times cheaper than
    ``take_along_axis`` on these small arrays.
    """
    batch, m = lam.shape
    idx = (np.abs(lam) < ZERO_TOL).sum(-1, keepdims=True) + np.arange(k)
    valid = idx < n
    return np.arange(batch)[:, None] * m + np.minimum(idx, max(m - 1, 0)), valid


def _repeated(lam: np.ndarray, flat: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``(B, k)`` mask of kept columns whose eigenvalue has a neighbour closer than ``CLUSTER_TOL``."""
    # close_next[b, j]: lam[b, j + 1] - lam[b, j] < CLUSTER_TOL (False at the last column)
    close_next = np.zeros(lam.shape, dtype=bool)
    close_next[:, :-1] = lam[:, 1:] - lam[:, :-1] < CLUSTER_TOL
    close_prev = np.zeros(lam.shape, dtype=bool)
    close_prev[:, 1:] = close_next[:, :-1] & (np.abs(lam[:, :-1]) >= ZERO_TOL)
    return valid & (close_prev.ravel()[flat] | close_next.ravel()[flat])


def _canonicalize(kept: np.ndarray, lam: np.ndarray, vec: np.ndarray, flat: np.ndarray, valid: np.ndarray) -> None:
    """Replace, in place, kept eigenvectors ``kept (B, n, k)`` of repeated eigenvalues by the canonical
    basis (module doc).

    Vectorised over all (graph, repeated eigenvalue) pairs of the batch, and run in coefficient space:
    with ``U`` the ``(n, d)`` eigenvectors of a cluster, column ``j`` of the projector ``U U^T`` is
    ``U x_j`` (``x_j = U^T e_j``) and ``U`` preserves norms, so Gram-Schmidt on the ``d``-dimensional
    ``x_j`` (columns of ``U^T``, in node order, skipping residual norms below ``RESIDUAL_TOL``) followed by
    ``U q`` gives the same basis as on the ``n x n`` projectors, at a fraction of the work. Step ``s``
    picks, for every pair at once, the first column still above the tolerance (columns skipped before
    stay below it, so this equals the sequential node-order process). Runs in numpy: for these small
    arrays its per-call overhead is several times below torch's.
    """
    repeated = _repeated(lam, flat, valid)
    if not repeated.any():
        return
    m = lam.shape[-1]
    # cluster id of every eigenvalue: a new cluster starts where the gap reaches CLUSTER_TOL
    cid = np.zeros(lam.shape, dtype=np.int64)
    np.cumsum(lam[:, 1:] - lam[:, :-1] >= CLUSTER_TOL, axis=1, out=cid[:, 1:])
    cid[np.abs(lam) < ZERO_TOL] = -1  # zero eigenvalues are never kept
    kept_cid = cid.ravel()[flat]  # (B, k)
    # one row per (graph, cluster) pair that holds a repeated kept eigenvalue
    key = np.arange(lam.shape[0])[:, None] * (m + 1) + kept_cid
    pairs = np.sort(key[repeated])  # unique by sorting: np.unique's hash path has a fixed cost per call
    pairs = pairs[np.concatenate([[True], pairs[1:] != pairs[:-1]])]
    pb, pc = pairs // (m + 1), pairs % (m + 1)
    members = cid[pb] == pc[:, None]  # (C, m)
    # the cluster's eigenvectors side by side: basis[c, :, :d] (zero columns past a cluster's size d)
    pair_of, column = np.nonzero(members)
    slot = np.arange(pair_of.shape[0]) - np.searchsorted(pair_of, pair_of)
    basis = np.zeros((pairs.shape[0], vec.shape[1], int(slot.max()) + 1))
    basis[pair_of, :, slot] = vec[pb[pair_of], :, column]
    resid = basis.transpose(0, 2, 1).copy()  # (C, d, n): column j is x_j = U^T e_j
    belongs = repeated[pb] & (kept_cid[pb] == pc[:, None])  # (C, k): kept columns of each pair
    rank = np.cumsum(belongs, axis=-1) - 1
    rows = np.arange(pairs.shape[0])
    canon = []
    for _ in range(int(belongs.sum(-1).max())):
        norms = np.sqrt(np.einsum("cdj,cdj->cj", resid, resid))  # residual norm of every column
        first = np.argmax(norms > RESIDUAL_TOL, axis=-1)  # first column above the tolerance
        q = resid[rows, :, first] / np.maximum(norms[rows, first], 1e-300)[:, None]  # (C, d)
        canon.append(np.einsum("cnd,cd->cn", basis, q))
        resid = resid - q[:, :, None] * np.einsum("cd,cdj->cj", q, resid)[:, None, :]
    canon = np.stack(canon, axis=-1)  # (C, n, r_max)
    pair_idx, col = np.nonzero(belongs)
    kept[pb[pair_idx], :, col] = canon[pair_idx, :, rank[pair_idx, col]]


def _lowest(batch, vectors: bool):
    lam, vec = batch.sym_lowest(K, ZERO_TOL, CLUSTER_TOL, vectors=vectors)
    return _numpy(lam), (_numpy(vec) if vectors else None)


def _numpy(x: torch.Tensor) -> np.ndarray:
    # no .cpu() call for CPU tensors: every torch call hands the GIL round, and the threads running
    # decompositions next to this one are waiting for it
    return x.numpy() if x.device.type == "cpu" else x.cpu().numpy()


def lap_pe(batch) -> torch.Tensor:
    """LapPE of a :class:`~gpse_dgl.pse.spectral.DenseBatch`: ``(B, n, 4)`` (float64, on the CPU)."""
    lam, vec = _lowest(batch, vectors=True)
    flat, valid = _kept_index(lam, n=batch.node_counts[:, None])
    batch_size, n, m = vec.shape
    rows = np.arange(batch_size)[:, None]
    kept = vec[rows, :, flat - rows * m].transpose(0, 2, 1)  # (B, n, k), a copy
    _canonicalize(kept, lam, vec, flat, valid)
    kept /= np.maximum(np.sqrt(np.einsum("bnk,bnk->bk", kept, kept)), 1e-12)[:, None, :]
    np.abs(kept, out=kept)
    kept *= valid[:, None, :]
    return torch.from_numpy(kept)


def eigvals(batch) -> torch.Tensor:
    """EigVals of a :class:`~gpse_dgl.pse.spectral.DenseBatch`: ``(B, 4)`` (float64, on the CPU)."""
    lam, _ = _lowest(batch, vectors=False)
    flat, valid = _kept_index(lam, n=batch.node_counts[:, None])
    return torch.from_numpy(np.maximum(lam.ravel()[flat], 0.0) * valid)


def _pad(x: np.ndarray, k: int, axis: int) -> np.ndarray:
    x = np.nan_to_num(np.asarray(x, dtype=np.float64))
    width = [(0, 0)] * x.ndim
    width[axis] = (0, max(k - x.shape[axis], 0))
    return np.take(np.pad(x, width), np.arange(k), axis=axis)


def lap_pe_sparse(graph) -> np.ndarray:
    """LapPE of one large :class:`~gpse_dgl.pse.spectral.SparseGraph`: ``(n, 4)``."""
    return np.abs(_pad(graph.lap_pe[0], K, axis=1))


def eigvals_sparse(graph) -> np.ndarray:
    """EigVals of one large :class:`~gpse_dgl.pse.spectral.SparseGraph`: ``(4,)``."""
    return np.clip(_pad(graph.lap_pe[1], K, axis=0), 0.0, None)
