"""The sparse LapPE / EigVals / RWSE path on every graph family against the dense reference, and its bounds.

Small members (~400 nodes) go through ``compute_pses`` with a low ``dense_limit``, so they take the sparse
path, and are compared with :mod:`gpse_dgl.pse.reference` (LapPE up to the rotation freedom of repeated
eigenvalues, as in ``_pse_graphs.assert_lap_pe_equivalent``). Large members check closed forms, memory
and the size limit.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from _pse_graphs import assert_lap_pe_equivalent, sym_spectrum
from gpse_dgl.data.shape_families import FAMILIES, family_edges, family_graph
from gpse_dgl.pse import compute_pse_tensors
from gpse_dgl.pse import pipeline as pse_pipeline
from gpse_dgl.pse import reference as ref
from gpse_dgl.pse.eigensolvers import component_pairs, envelope_size
from gpse_dgl.pse.sparse import _normalised_adjacency, graph_components, sparse_lap_pe, sparse_rwse
from gpse_dgl.utils.errors import GraphTooLargeError
from gpse_dgl.utils.graph import simple_edges

NAMES = ["LapPE", "EigVals", "RWSE"]
SMALL = 400


def _sparse_pses(g, **options):
    r = compute_pse_tensors([g], NAMES, dense_limit=64, **options)
    return r.node["LapPE"].double().numpy(), r.graph["EigVals"][0].double().numpy(), r.node["RWSE"].double().numpy()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_matches_dense_reference(family):
    g = family_graph(family, SMALL)
    lap, vals, rw = _sparse_pses(g)
    adj = ref.dense_adjacency(g)
    evals = sym_spectrum(g)
    np.testing.assert_allclose(vals, ref.ref_eigvals(adj), atol=1e-6)
    assert_lap_pe_equivalent(lap, ref.ref_lap_pe(adj), evals, atol=1e-5)
    np.testing.assert_allclose(rw, ref.ref_rwse(adj), atol=1e-6)


@pytest.mark.parametrize("family", ["star", "double_star", "path", "cycle", "grid", "complete_bipartite",
                                    "barabasi_albert"])
@pytest.mark.parametrize("factor_max", [0, None])
def test_both_solvers_agree_with_dense(family, factor_max):
    """factor_max=0 forces Lanczos, the default takes shift-invert where the envelope allows."""
    n, u, v = family_edges(family, SMALL)
    u, v = simple_edges(u, v, n)
    options = {} if factor_max is None else {"factor_max": factor_max}
    vecs, vals = sparse_lap_pe(n, u, v, k=4, **options)
    adj = np.zeros((n, n))
    adj[u, v] = adj[v, u] = 1.0
    g = family_graph(family, SMALL)
    np.testing.assert_allclose(vals, ref.ref_eigvals(adj), atol=1e-8)
    assert_lap_pe_equivalent(vecs, ref.ref_lap_pe(adj), sym_spectrum(g), atol=1e-6)


@pytest.mark.parametrize("family,solver", [("path", "shift-invert"), ("star", "shift-invert"),
                                           ("grid", "shift-invert"), ("double_star", "shift-invert"),
                                           ("barabasi_albert", "lanczos")])
def test_solver_choice(family, solver):
    n, u, v = family_edges(family, 2000)
    u, v = simple_edges(u, v, n)
    s, deg = _normalised_adjacency(n, u, v)
    phi = np.sqrt(deg / deg.sum())
    _, _, chosen = component_pairs(s, deg, phi, 4, 1e-10, 0, factor_max=200_000)
    assert chosen == solver


def test_factorisation_fill_stays_in_the_envelope():
    from gpse_dgl.pse.eigensolvers import _grounded_factor

    n, u, v = family_edges("grid", 900)
    u, v = simple_edges(u, v, n)
    s, deg = _normalised_adjacency(n, u, v)
    adj = s.copy()
    adj.data[:] = 1.0
    assert _grounded_factor(adj, deg, factor_max=100) is None  # a 30 x 30 grid's envelope is ~900 x 30
    solve, keep = _grounded_factor(adj, deg, factor_max=10 ** 6)
    # the solver really inverts the grounded Laplacian
    lap = (np.diag(deg) - adj.toarray())[np.ix_(keep, keep)]
    b = np.random.default_rng(0).standard_normal(keep.size)
    np.testing.assert_allclose(lap @ solve(b), b, atol=1e-9)
    import scipy.sparse as sp

    assert envelope_size(sp.csr_matrix(np.tril(np.ones((4, 4))))) == 6
    assert envelope_size(sp.identity(5, format="csr")) == 0


def test_star_60000_leaves_plus_isolated_nodes():
    """The issue's MemoryError: nnz(S^2) = 3.6e9 on this hub. Now exact, bounded and closed-form."""
    n, u, v = family_edges("star", 60_001)
    g = family_graph("star", 60_001)
    g.add_nodes(100)
    tracemalloc.start()
    r = compute_pse_tensors([g], NAMES)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 500e6, f"peak {peak / 1e6:.0f} MB"
    np.testing.assert_allclose(r.graph["EigVals"][0].numpy(), [1, 1, 1, 1], atol=1e-6)
    lap = r.node["LapPE"].double().numpy()
    np.testing.assert_allclose(np.linalg.norm(lap, axis=0), 1.0, atol=1e-5)
    rw = r.node["RWSE"].double().numpy()
    even, odd = rw[:, 0::2], rw[:, 1::2]  # steps 2, 4, ... and 3, 5, ...
    np.testing.assert_allclose(even[0], 1.0, atol=1e-6)  # the hub always returns after an even walk
    np.testing.assert_allclose(even[1:60_001], 1 / 60_000, rtol=1e-5)
    assert not odd.any() and not rw[60_001:].any()  # bipartite; isolated nodes 0


def test_path_80000_nodes_closed_form():
    n = 80_000
    nodes, u, v = family_edges("path", n)
    vecs, vals = sparse_lap_pe(nodes, u, v)
    j = np.arange(1, 5)
    np.testing.assert_allclose(vals, 1 - np.cos(np.pi * j / (n - 1)), rtol=1e-6)
    # eigenvector j of the path's L_sym: proportional to sqrt(d_i) cos(pi j i / (n - 1))
    i = np.arange(n)
    expect = np.sqrt(np.where((i == 0) | (i == n - 1), 1.0, 2.0)) * np.abs(np.cos(np.pi * i / (n - 1)))
    np.testing.assert_allclose(vecs[:, 0], expect / np.linalg.norm(expect), atol=1e-6)
    rw = sparse_rwse(nodes, u, v)
    assert rw[n // 2, 0] == pytest.approx(0.5) and rw[n // 2, 2] == pytest.approx(0.375)  # binomial walks


def test_rwse_hutchinson_is_exact_on_stars_and_paths():
    """Deflation leaves nothing to estimate on a star or K(a, b) (the spectrum of S is +-1 and 0); sparse
    powers cover every step on a path."""
    for family in ("star", "path", "complete_bipartite"):
        n, u, v = family_edges(family, 400)
        adj = np.zeros((n, n))
        u, v = simple_edges(u, v, n)
        adj[u, v] = adj[v, u] = 1.0
        est = sparse_rwse(n, u, v, method="hutchinson", num_probes=4, exact_nnz=0 if family != "path" else None)
        np.testing.assert_allclose(est, ref.ref_rwse(adj), atol=1e-10, err_msg=family)


def test_graph_components_on_families():
    n, u, v = family_edges("tiny_components", 90)
    labels, sizes, bipartite, _ = graph_components(n, *simple_edges(u, v, n))
    assert sorted(set(sizes.tolist())) == [2, 3, 4]
    assert bipartite[sizes == 3].sum() == 0 and bipartite[sizes != 3].all()


def test_sparse_limit_refuses_before_any_work(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("work started")

    monkeypatch.setattr(pse_pipeline.SparseGraph, "rwse", fail)
    g = family_graph("path", 5000)
    with pytest.raises(GraphTooLargeError) as info:
        compute_pse_tensors([g], NAMES, dense_limit=100, sparse_limit=4000)
    message = str(info.value)
    assert "\n" not in message and "sparse_limit=4,000" in message and "--sparse-limit" in message
    # several parts: refused before the first part is computed
    with pytest.raises(GraphTooLargeError):
        compute_pse_tensors([family_graph("path", 50)] * 2100 + [g], ["RWSE"], dense_limit=100,
                            sparse_limit=4000, num_workers=2)


def test_sparse_graph_reports_progress(monkeypatch, capsys):
    monkeypatch.setenv("GPSE_DGL_PROGRESS", "0")
    monkeypatch.setattr(pse_pipeline, "SPARSE_PROGRESS_DELAY", 0.0)
    compute_pse_tensors([family_graph("cycle", 3000)], NAMES, dense_limit=100)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and all(line.startswith("LapPE, EigVals, RWSE of graph 0 (3,000 nodes): ") for line in lines)
    assert lines[-1].startswith("LapPE, EigVals, RWSE of graph 0 (3,000 nodes): 100% (9,000/9,000 nodes")


def test_quick_sparse_graph_is_silent(monkeypatch, capsys):
    monkeypatch.setenv("GPSE_DGL_PROGRESS", "0")
    monkeypatch.setattr(pse_pipeline, "SPARSE_PROGRESS_DELAY", 120.0)  # "quick" even on a loaded machine
    compute_pse_tensors([family_graph("cycle", 3000)], NAMES, dense_limit=100)
    assert capsys.readouterr().err == ""


def test_self_loops_and_multi_edges_are_ignored():
    g = family_graph("loops_multi", 500)
    clean = family_graph("cycle", 500)
    for a, b in zip(_sparse_pses(g), _sparse_pses(clean)):
        np.testing.assert_array_equal(a, b)
    assert g.num_edges() > 2 * clean.num_edges() and g.has_edges_between(3, 3)  # the input really has them
