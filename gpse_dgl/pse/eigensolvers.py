r"""Lowest non-zero eigenpairs of one connected component's normalised Laplacian, for the sparse LapPE.

Notation as in :mod:`.sparse`: component of ``n`` nodes with degrees :math:`d > 0`, 0/1 adjacency
:math:`A`, :math:`S = D^{-1/2} A D^{-1/2}`, :math:`L = I - S`, unit null vector
:math:`\phi = D^{1/2} 1 / \sqrt{\mathrm{vol}}`, combinatorial Laplacian :math:`K = D - A = D^{1/2} L D^{1/2}`.

Two solvers, chosen per component by :func:`component_pairs`:

* **shift-invert** (:func:`_shift_invert`): Lanczos on the pseudo-inverse :math:`L^+`, whose largest
  eigenvalues :math:`1/\lambda` are the smallest non-zero :math:`\lambda` of :math:`L`, well separated
  even when the :math:`\lambda` are tiny and clustered (a path of ``n`` nodes has
  :math:`\lambda_j \approx (\pi j / n)^2 / 2`: relative gaps stay O(1) for :math:`1/\lambda`, while for
  plain Lanczos they shrink like :math:`1/n^2`). For :math:`x \perp \phi`, :math:`y = L^+ x` is
  :math:`y = Q D^{1/2} z` with :math:`K z = D^{1/2} x` (a consistent system: :math:`1^\top D^{1/2} x
  = \sqrt{\mathrm{vol}}\,\phi^\top x = 0`) and :math:`Q = I - \phi\phi^\top`. One solution has
  :math:`z_r = 0` at a *ground* node ``r`` (the highest-degree one: removing the hub's row leaves the
  sparsest system); the rest solves the grounded system :math:`K_{-r} z_{-r} = b_{-r}`, positive definite
  on a connected component. It is factorised once (SuperLU) in reverse Cuthill-McKee order without
  pivoting, so the factors' fill stays inside the matrix's envelope
  :math:`\sum_i (i - \min\{j \le i: K_{ij} \ne 0\})` (computed before any factorisation: that is the
  memory bound), and so are its multiply-adds. ``factor_max`` (envelope entries) and ``factor_work``
  (multiply-adds) decide whether a component takes this path.
* **Lanczos** (:func:`_lanczos`): ARPACK on :math:`M = 2I - L - 3\phi\phi^\top` (largest eigenvalues
  :math:`2 - \lambda`; :math:`\phi` moved to -1), products with the sparse ``S`` only. It converges fast
  when the lowest eigenvalues are not tiny (expander-like graphs: random and power-law graphs), which is
  exactly where the envelope is large (no ordering keeps an expander's fill low). Where neither holds (a
  large expander with long chains hanging off it, a 2-D mesh beyond ``factor_max``) Lanczos is slow;
  ``ARPACK``'s iteration cap then raises :class:`~gpse_dgl.utils.errors.GPSEError`.

Both run in rounds (:func:`_with_missed_copies`): Lanczos with one start vector sees one copy of a repeated
eigenvalue, so the run is repeated with the vectors found so far deflated until a round finds nothing
below the current k-th eigenvalue. ARPACK's ``tol`` bounds the relative residual of each Ritz pair of the
operator; start vectors are seeded, so results are deterministic.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh, splu

from ..utils.errors import GPSEError

__all__ = ["component_pairs", "envelope", "envelope_size", "DEFAULT_FACTOR_MAX", "DEFAULT_FACTOR_WORK"]

#: Envelope entries up to which a component is solved by shift-invert (SuperLU stores both triangles:
#: at most ``2 * 12`` bytes per entry, ~0.7 GB at the default).
DEFAULT_FACTOR_MAX = 30_000_000
#: Bound on the factorisation's multiply-adds up to which shift-invert is chosen: a 316 x 316 grid needs
#: 5.0e9 (Lanczos there: over 200 s), Barabasi-Albert graphs of 5,000 / 10,000 nodes 4.1e9 / 3.4e10
#: (expander-like: Lanczos takes about a second, the factorisation a few).
DEFAULT_FACTOR_WORK = 6e9


def envelope(mat: sp.csr_matrix) -> tuple[int, float]:
    r"""``(entries, work)`` of the lower envelope of a structurally symmetric matrix.

    Row ``i`` spans columns :math:`f_i .. i - 1` (:math:`f_i` its first column, at most ``i``), width
    :math:`w_i = i - f_i`. ``entries`` :math:`= \sum_i w_i` bounds the fill of an LU factorisation without
    pivoting in this order (fill never leaves the envelope); ``work`` :math:`= \sum_i \sum_{j = f_i}^{i-1}
    w_j` bounds its multiply-adds (entry ``(i, j)`` is a dot product over at most :math:`w_j` terms).
    """
    n = mat.shape[0]
    rows = np.arange(n)
    first = rows.copy()
    nonempty = np.diff(mat.indptr) > 0
    if nonempty.any():
        starts = mat.indptr[:-1][nonempty]
        first[nonempty] = np.minimum(np.minimum.reduceat(mat.indices, starts), rows[nonempty])
    width = rows - first
    total = np.concatenate([[0.0], np.cumsum(width, dtype=np.float64)])
    return int(width.sum()), float((total[rows] - total[first]).sum())


def envelope_size(mat: sp.csr_matrix) -> int:
    """Entries of the lower envelope of ``mat`` (see :func:`envelope`)."""
    return envelope(mat)[0]


def _grounded_factor(adj_c: sp.csr_matrix, deg_c: np.ndarray, factor_max: int, factor_work: float = None):
    """``(solve, keep)``: a solver of the grounded system ``K_{-r} z = b`` (rows ``keep``), or None when its
    envelope in reverse Cuthill-McKee order exceeds ``factor_max`` entries or ``factor_work`` multiply-adds
    (nothing factorised then)."""
    factor_work = DEFAULT_FACTOR_WORK if factor_work is None else factor_work
    n = adj_c.shape[0]
    ground = int(np.argmax(deg_c))
    keep = np.delete(np.arange(n), ground)
    lap = (sp.diags(deg_c) - adj_c).tocsr()[keep][:, keep].tocsr()
    order = reverse_cuthill_mckee(lap, symmetric_mode=True)
    lap = lap[order][:, order].tocsr()
    entries, work = envelope(lap)
    if entries > factor_max or work > factor_work:
        return None
    # no pivoting (diag_pivot_thresh=0) and the given order (NATURAL): fill stays in the envelope
    lu = splu(lap.tocsc(), permc_spec="NATURAL", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
    return lu.solve, keep[order]


def _arpack(matmat, n: int, k: int, tol: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest eigenpairs of a symmetric operator given by ``matmat``, seeded start vector."""
    op = LinearOperator((n, n), matvec=matmat, matmat=matmat, dtype=np.float64)
    v0 = np.random.default_rng(seed).standard_normal(n)
    ncv = min(n - 1, max(2 * k + 1, 24))
    try:
        return eigsh(op, k=k, which="LA", tol=tol, v0=v0, ncv=ncv, maxiter=max(1000, 10 * n))
    except ArpackNoConvergence as err:
        raise GPSEError(f"LapPE eigensolver did not converge on a {n}-node component; "
                        f"retry with a looser tol (now {tol:g})") from err


def _shift_invert(solve, keep, deg_c, phi_c, found, k, tol, seed):
    r"""k smallest non-zero eigenpairs of L off ``found``: ARPACK's largest of :math:`Q L^+ Q`."""
    n = phi_c.shape[0]
    basis = phi_c[:, None] if found is None else np.concatenate([phi_c[:, None], found], axis=1)
    sqrt_deg = np.sqrt(deg_c)

    def matmat(x):
        x = x.reshape(n, -1)
        x = x - basis @ (basis.T @ x)  # Q: the operator is 0 on phi and on the pairs found before
        z = np.zeros_like(x)
        z[keep] = solve(np.ascontiguousarray(sqrt_deg[keep, None] * x[keep]))  # z[ground] = 0
        y = sqrt_deg[:, None] * z
        return y - basis @ (basis.T @ y)

    mu, vecs = _arpack(matmat, n, k, tol, seed)
    return 1.0 / np.maximum(mu, 1e-300), vecs


def _lanczos(s_c, phi_c, found, found_vals, k, tol, seed):
    r"""k smallest non-zero eigenpairs of L off ``found``: ARPACK's largest of
    :math:`I + S - \sum_j c_j v_j v_j^\top`, with phi and each found pair moved to -1."""
    n = s_c.shape[0]
    vecs = phi_c[:, None] if found is None else np.concatenate([phi_c[:, None], found], axis=1)
    shifts = np.concatenate([[3.0], 3.0 - found_vals])  # theta = 2 - lambda, moved by theta + 1

    def matmat(x):
        x = x.reshape(n, -1)
        return x + s_c @ x - vecs @ (shifts[:, None] * (vecs.T @ x))

    theta, v = _arpack(matmat, n, k, tol, seed)
    return 2.0 - theta, v


def _with_missed_copies(run, k: int, margin, max_rounds: int = 4):
    """Repeat ``run(found_vecs, found_vals, round)`` -> ``(lam, vecs)`` with the pairs found so far deflated,
    keeping eigenvalues below the current k-th minus ``margin(kth)``, until a round adds none."""
    found_l, found_v = np.empty(0), None
    for r in range(max_rounds):
        lam, v = run(found_v, found_l, r)
        if found_l.size:
            kth = np.sort(found_l)[min(k, found_l.size) - 1]
            new = lam < kth - margin(kth)
            if not new.any():
                break
            lam, v = lam[new], v[:, new]
        found_l = np.concatenate([found_l, lam])
        found_v = v if found_v is None else np.concatenate([found_v, v], axis=1)
    order = np.argsort(found_l, kind="stable")[:k]
    return found_l[order], found_v[:, order]


def component_pairs(s_c: sp.csr_matrix, deg_c: np.ndarray, phi_c: np.ndarray, k: int, tol: float, seed: int,
                    factor_max: int = DEFAULT_FACTOR_MAX) -> tuple[np.ndarray, np.ndarray, str]:
    """k smallest non-zero eigenpairs of one connected component's L, with multiplicities.

    Returns ``(eigenvalues (k,) ascending, eigenvectors (n, k), solver)``, solver "shift-invert" or
    "lanczos" (see the module docstring for the choice).
    """
    adj_c = s_c.copy()
    adj_c.data[:] = 1.0  # S has A's pattern, no explicit zeros
    factor = _grounded_factor(adj_c, deg_c, factor_max)
    if factor is not None:
        solve, keep = factor
        vals, vecs = _with_missed_copies(
            lambda found, _vals, r: _shift_invert(solve, keep, deg_c, phi_c, found, k, tol, seed + r),
            k, margin=lambda kth: 10 * tol * kth)
        return vals, vecs, "shift-invert"
    vals, vecs = _with_missed_copies(
        lambda found, found_vals, r: _lanczos(s_c, phi_c, found, found_vals, k, tol, seed + r),
        k, margin=lambda kth: 10 * tol)
    return vals, vecs, "lanczos"
