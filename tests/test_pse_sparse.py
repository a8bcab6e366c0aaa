"""Sparse LapPE / RWSE for large graphs against dense numpy references."""
import tracemalloc

import networkx as nx
import numpy as np
import pytest

from gpse_dgl.pse.sparse import graph_components, sparse_lap_pe, sparse_rwse
from gpse_dgl.utils.graph import simple_edges

STEPS = list(range(2, 22))


def _dense_laplacian(n, u, v):
    a = np.zeros((n, n))
    a[u, v] = a[v, u] = 1.0
    d = a.sum(1)
    inv = np.where(d > 0, 1.0 / np.sqrt(np.maximum(d, 1e-300)), 0.0)
    return a, d, np.eye(n) - inv[:, None] * a * inv[None, :]


def _dense_lap_pe(n, u, v, k=4):
    """The reference definition: full eigh, drop |lambda| < 1e-6, next k, unit norm, abs, pad."""
    _, _, lap = _dense_laplacian(n, u, v)
    w, vec = np.linalg.eigh(lap)
    keep = np.abs(w) >= 1e-6
    w, vec = w[keep], vec[:, keep]
    vecs, vals = np.zeros((n, k)), np.zeros(k)
    m = min(k, w.size)
    vecs[:, :m] = np.abs(vec[:, :m] / np.linalg.norm(vec[:, :m], axis=0))
    vals[:m] = np.clip(w[:m], 0, None)
    return vecs, vals, w


def _dense_rwse(n, u, v, steps=STEPS):
    a, d, _ = _dense_laplacian(n, u, v)
    p = a / np.where(d > 0, d, 1.0)[:, None]
    out, m = {}, np.eye(n)
    for t in range(max(steps) + 1):
        out[t] = np.diag(m).copy()
        m = m @ p
    return np.stack([out[t] for t in steps], axis=1)


def _graph(seed, n=600, giant=450, m=700, extra=True):
    """Random graph: an ER part on the first ``giant`` nodes, small components (a triangle, a path, a
    star, an edge), the rest isolated."""
    rng = np.random.default_rng(seed)
    u = list(rng.integers(0, giant, m))
    v = list(rng.integers(0, giant, m))
    if extra:
        b = giant + 10
        for a_, c_ in [(b, b + 1), (b + 1, b + 2), (b + 2, b), (b + 5, b + 6), (b + 6, b + 7), (b + 7, b + 8),
                       (b + 20, b + 21), (b + 20, b + 22), (b + 20, b + 23), (b + 30, b + 31)]:
            u.append(a_)
            v.append(c_)
    return simple_edges(np.array(u), np.array(v), n)


def _simple_columns(w, k):
    """Columns j < k whose eigenvalue is separated from its neighbours (abs eigenvector well defined)."""
    ok = []
    for j in range(min(k, w.size)):
        lo = w[j - 1] if j > 0 else -np.inf
        hi = w[j + 1] if j + 1 < w.size else np.inf
        if min(w[j] - lo, hi - w[j]) > 1e-4:
            ok.append(j)
    return ok


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dense_max", [8, 256])
def test_lap_pe_matches_dense(seed, dense_max):
    n = 600
    u, v = _graph(seed, n=n)
    vecs, vals = sparse_lap_pe(n, u, v, k=4, dense_max=dense_max)
    ref_vecs, ref_vals, w = _dense_lap_pe(n, u, v)
    np.testing.assert_allclose(vals, ref_vals, atol=1e-8)
    cols = _simple_columns(w, 4)
    assert cols, "test graph has no simple eigenvalue: not a useful check"
    np.testing.assert_allclose(vecs[:, cols], ref_vecs[:, cols], atol=1e-5)
    assert np.allclose(np.linalg.norm(vecs, axis=0), 1.0)


def test_lap_pe_components_interleave():
    # Eigenvalues of different components interleave: two paths and a cycle of different lengths.
    G = nx.disjoint_union_all([nx.path_graph(40), nx.cycle_graph(31), nx.path_graph(23), nx.empty_graph(3)])
    u, v = simple_edges(*np.array(G.edges()).T, G.number_of_nodes())
    n = G.number_of_nodes()
    for k in (4, 8):
        vecs, vals = sparse_lap_pe(n, u, v, k=k, dense_max=30)
        ref_vecs, ref_vals, w = _dense_lap_pe(n, u, v, k=k)
        np.testing.assert_allclose(vals, ref_vals, atol=1e-8)
        cols = _simple_columns(w, k)
        np.testing.assert_allclose(vecs[:, cols], ref_vecs[:, cols], atol=1e-5)


def test_lap_pe_repeated_eigenvalues_on_grid():
    # The square grid has double eigenvalues; Lanczos alone finds one copy (see _lanczos_component_pairs).
    G = nx.convert_node_labels_to_integers(nx.grid_2d_graph(30, 30))
    u, v = simple_edges(*np.array(G.edges()).T, 900)
    _, vals = sparse_lap_pe(900, u, v, k=4, dense_max=10)
    _, ref_vals, _ = _dense_lap_pe(900, u, v)
    assert ref_vals[0] == pytest.approx(ref_vals[1])
    np.testing.assert_allclose(vals, ref_vals, atol=1e-8)


def test_lap_pe_padding_and_tiny_graphs():
    e = np.empty(0, dtype=np.int64)
    vecs, vals = sparse_lap_pe(0, e, e)
    assert vecs.shape == (0, 4) and vals.tolist() == [0.0] * 4
    # One edge: eigenvalues 0 (dropped) and 2; padded with zeros.
    vecs, vals = sparse_lap_pe(2, np.array([0]), np.array([1]))
    np.testing.assert_allclose(vals, [2, 0, 0, 0], atol=1e-12)
    np.testing.assert_allclose(vecs[:, 0], [2 ** -0.5] * 2)
    assert not vecs[:, 1:].any()
    # Isolated nodes contribute eigenvalue 1 with a unit vector.
    vecs, vals = sparse_lap_pe(3, np.array([0]), np.array([1]))
    np.testing.assert_allclose(vals, [1, 2, 0, 0], atol=1e-12)
    np.testing.assert_allclose(vecs[:, 0], [0, 0, 1])


def test_graph_components_bipartite_sides():
    # A square (bipartite), a triangle (not), an isolated node.
    u, v = simple_edges(np.array([0, 1, 2, 3, 4, 5, 6]), np.array([1, 2, 3, 0, 5, 6, 4]), 8)
    labels, sizes, bip, side = graph_components(8, u, v)
    assert labels.tolist() == [0, 0, 0, 0, 1, 1, 1, 2]
    assert sizes.tolist() == [4, 3, 1]
    assert bip.tolist() == [True, False, False]
    assert side[:4].tolist() in ([1, -1, 1, -1], [-1, 1, -1, 1]) and (side[4:] == 1).all()


@pytest.mark.parametrize("seed", range(3))
def test_rwse_exact_matches_dense(seed):
    n = 500
    u, v = _graph(seed, n=n, giant=400, m=600)  # includes trees (bipartite), a triangle, isolated nodes
    got = sparse_rwse(n, u, v, steps=STEPS, method="exact")
    ref = _dense_rwse(n, u, v)
    np.testing.assert_allclose(got, ref, atol=1e-12)
    isolated = np.bincount(np.concatenate([u, v]), minlength=n) == 0
    assert isolated.sum() > 10 and (got[isolated] == 0).all()
    # Small blocks give the same answer.
    from gpse_dgl.pse.sparse import _normalised_adjacency, _rwse_exact

    s, _ = _normalised_adjacency(n, u, v)
    np.testing.assert_allclose(_rwse_exact(s, STEPS, block=7), ref, atol=1e-12)


def test_rwse_other_steps():
    n = 200
    u, v = _graph(5, n=n, giant=150, m=250)
    steps = [0, 1, 3, 4, 9]
    ref = _dense_rwse(n, u, v, steps=steps)
    for method in ("exact", "hutchinson"):
        np.testing.assert_allclose(sparse_rwse(n, u, v, steps=steps, method=method), ref, atol=1e-12)
    with pytest.raises(ValueError):
        sparse_rwse(n, u, v, method="magic")


def test_rwse_hutchinson_error_bounds():
    # Documented in gpse_dgl/pse/sparse.py: 2,000 nodes, mean degree ~4, N = 256, no exact powers.
    n = 2000
    u, v = _graph(11, n=n, giant=1800, m=3600)
    ref = sparse_rwse(n, u, v, method="exact")  # checked against dense numpy above; dense is slow here
    est = sparse_rwse(n, u, v, method="hutchinson", num_probes=256, exact_nnz=0, seed=0)
    err = np.abs(est - ref)
    assert err.mean() < 4e-3 and err.max() < 0.1, (err.mean(), err.max())
    # Deflation: long even walks are dominated by the exactly known stationary term, so they are accurate.
    assert err[:, -2].max() < 0.03
    # More probes -> smaller error (the estimate is not exact by accident).
    est4 = sparse_rwse(n, u, v, method="hutchinson", num_probes=1024, exact_nnz=0, seed=1)
    assert 0 < np.abs(est4 - ref).mean() < err.mean()
    # Seeded: deterministic.
    np.testing.assert_array_equal(est, sparse_rwse(n, u, v, method="hutchinson", num_probes=256,
                                                   exact_nnz=0, seed=0))
    # With exact sparse powers (default budget) this graph is small enough to be exact for every step.
    np.testing.assert_allclose(sparse_rwse(n, u, v, method="hutchinson"), ref, atol=1e-12)


def _large(n, m, seed=0):
    rng = np.random.default_rng(seed)
    return simple_edges(rng.integers(0, n, m), rng.integers(0, n, m), n)


def _check_large(n, m):
    u, v = _large(n, m)
    tracemalloc.start()
    vecs, vals = sparse_lap_pe(n, u, v, k=4)
    rw = sparse_rwse(n, u, v)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < min(n * n * 8 / 10, 600e6), f"peak {peak / 1e6:.0f} MB"
    assert vecs.shape == (n, 4) and np.isfinite(vecs).all()
    assert (np.diff(vals) >= -1e-9).all() and (vals > 0).all()
    assert rw.shape == (n, 20) and (rw >= 0).all() and (rw <= 1).all()
    deg = np.bincount(np.concatenate([u, v]), minlength=n)
    # diag(P^2) = sum_j 1/(d_i d_j) over neighbours j: exact in both methods.
    ref2 = np.zeros(n)
    np.add.at(ref2, u, 1.0 / (deg[u] * deg[v]))
    np.add.at(ref2, v, 1.0 / (deg[u] * deg[v]))
    np.testing.assert_allclose(rw[:, 0], ref2, atol=1e-12)


def test_large_graph_no_dense_allocation_fast():
    _check_large(20_000, 40_000)


@pytest.mark.slow
def test_100k_graph_no_dense_allocation():
    _check_large(100_000, 200_000)
