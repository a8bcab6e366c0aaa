"""The half-size Gram eigenproblem of bipartite graphs (gpse_dgl.pse.bipartite) against the full one."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch

from _pse_graphs import assert_lap_pe_equivalent, cycle, graph, path, random_graphs, star, sym_spectrum
from gpse_dgl.pse import compute_pse_tensors
from gpse_dgl.pse import reference as ref
from gpse_dgl.pse.bipartite import PAD_EIGVAL, SIGMA_MIN, GramSplit, bipartition, needed_columns, uncovered
from gpse_dgl.pse.spectral import DenseBatch, EdgeCollection


def complete_bipartite(p, q):
    return graph(p + q, [(i, p + j) for i in range(p) for j in range(q)])


def grid(rows, cols):
    def node(r, c):
        return r * cols + c

    edges = [(node(r, c), node(r, c + 1)) for r in range(rows) for c in range(cols - 1)]
    edges += [(node(r, c), node(r + 1, c)) for r in range(rows - 1) for c in range(cols)]
    return graph(rows * cols, edges)


def union(*parts, isolated=0):
    edges, n = [], 0
    for g in parts:
        src, dst = g.edges()
        edges += [(int(a) + n, int(b) + n) for a, b in zip(src, dst)]
        n += g.num_nodes()
    return graph(n + isolated, edges, bidirected=False)


@pytest.fixture(scope="module")
def bipartite_graphs():
    from gpse_dgl.data.molecules import load_embedded_molecules

    special = [cycle(8), cycle(12), path(9), path(30), star(6), star(15), grid(4, 5), grid(6, 6),
               complete_bipartite(3, 3), complete_bipartite(4, 8), complete_bipartite(5, 9),
               union(cycle(6), path(7), isolated=2), union(grid(3, 3), grid(3, 3)),
               union(complete_bipartite(3, 3), cycle(10)), graph(10, [(0, 1), (2, 3), (4, 5)])]
    return load_embedded_molecules()[::5] + random_graphs(seed=11, trees=80, er=40, multi=80) + special


def _nx(g):
    out = nx.Graph()
    out.add_nodes_from(range(g.num_nodes()))
    src, dst = g.edges()
    out.add_edges_from((int(a), int(b)) for a, b in zip(src, dst) if int(a) != int(b))
    return out


def test_bipartition_matches_networkx(bipartite_graphs):
    coll = EdgeCollection.from_graphs(bipartite_graphs)
    part = bipartition(coll.num_nodes, coll.u, coll.v)
    assert part.bipartite.sum() > len(bipartite_graphs) // 2  # the fixture is mostly bipartite
    for gid, g in enumerate(bipartite_graphs):
        h = _nx(g)
        assert part.bipartite[gid] == nx.is_bipartite(h), gid
        side = part.gram_side[coll.node_offset[gid]:coll.node_offset[gid + 1]]
        assert part.gram_size[gid] == side.sum()
        if not part.bipartite[gid]:
            assert not side.any()
            continue
        for comp in nx.connected_components(h):
            colours = nx.bipartite.color(h.subgraph(comp))
            chosen = {i for i in comp if side[i]}
            if len(comp) == 1:  # isolated nodes belong to the large side
                assert not chosen
                continue
            class0 = {i for i in comp if colours[i] == 0}
            assert chosen in (class0, set(comp) - class0), gid  # one colour class ...
            assert len(chosen) <= len(comp) - len(chosen), gid  # ... the smaller one


def _solve_now(key, fn, *args):
    return fn(*args)


def test_gram_pairs_are_the_lowest_eigenpairs():
    """The Gram eigenvalues are the p lowest of L_sym; the pairs GramSplit returns are eigenpairs."""
    graphs = [grid(3, 4), grid(2, 6), path(12), complete_bipartite(5, 7), cycle(12), complete_bipartite(4, 8)]
    coll = EdgeCollection.from_graphs(graphs)
    sym = coll.dense_sym_laplacian(np.arange(6), 12)
    full_lam = torch.linalg.eigvalsh(sym)
    split = GramSplit(coll, np.arange(6), 12)
    # K_{4,8}: 4 Gram-side nodes cannot cover a zero eigenvalue and 4 more: full decomposition up front
    assert split.rows.tolist() == [True] * 5 + [False] and split.p.tolist() == [6, 6, 6, 5, 6]
    (key, solver, (gram,)), (other_key, _, (others,)) = split.jobs(vectors=False)
    assert key == "gram" and other_key == "others" and others.shape == (1, 12, 12)
    mu = solver(gram).flip(-1)  # descending sigma^2, padding (-1) last
    for b, p in enumerate(split.p):
        assert torch.all(mu[b, p:] == -1.0)
        lam = 1 - mu[b, :p].clamp_min(0).sqrt()
        ok = (1 - lam) >= SIGMA_MIN  # near eigenvalue 1 (sigma ~ 0) the square root loses digits
        torch.testing.assert_close(lam[ok], full_lam[b, :p][ok], atol=1e-12, rtol=0)
        torch.testing.assert_close(lam, full_lam[b, :p], atol=1e-7, rtol=0)
    lam, vec = split.lowest(_solve_now, 4, 1e-6, 1e-8, vectors=True)
    # K_{5,7} keeps eigenvalue 1 (sigma = 0): it falls back to the full decomposition after the Gram solve
    assert lam.shape[1] == vec.shape[2] == 12
    for b in range(6):
        m = int((lam[b] < PAD_EIGVAL).sum())
        torch.testing.assert_close(lam[b, :m], full_lam[b, :m], atol=1e-12, rtol=0)
        x = vec[b, :, :m]
        torch.testing.assert_close(sym[b] @ x, x * lam[b, :m], atol=1e-12, rtol=0)
        torch.testing.assert_close(x.T @ x, torch.eye(m, dtype=x.dtype), atol=1e-12, rtol=0)
    values, none = split.lowest(_solve_now, 4, 1e-6, 1e-8, vectors=False)
    assert none is None
    torch.testing.assert_close(values, lam, atol=1e-12, rtol=0)
    covered = GramSplit(coll, np.array([0, 1, 2, 4]), 12)
    assert covered.lowest(_solve_now, 4, 1e-6, 1e-8, vectors=True)[1].shape[2] < 12  # the columns LapPE reads


@pytest.mark.parametrize("workers", [1, 2])
def test_lap_pe_and_eigvals_equal_the_full_decomposition(bipartite_graphs, workers):
    """LapPE (canonical bases of repeated eigenvalues included) and EigVals from the Gram path equal
    those from the full eigendecomposition (RWSE makes the batch decompose L_sym fully)."""
    full = compute_pse_tensors(bipartite_graphs, ["LapPE", "EigVals", "RWSE"], num_workers=workers)
    for names in (["LapPE"], ["EigVals"], ["LapPE", "EigVals"]):
        gram = compute_pse_tensors(bipartite_graphs, names, num_workers=workers)
        if "LapPE" in names:
            torch.testing.assert_close(gram.node["LapPE"], full.node["LapPE"], atol=1e-6, rtol=0)
        if "EigVals" in names:
            torch.testing.assert_close(gram.graph["EigVals"], full.graph["EigVals"], atol=1e-7, rtol=0)


def test_gram_path_matches_reference_and_solves_half_size(monkeypatch):
    """Trees of 20 nodes are decomposed as Gram matrices of at most 10 rows, and agree with the
    per-graph reference; graphs the Gram pairs cannot cover (stars: eigenvalue 1 among the kept
    ones) fall back to the full decomposition."""
    sizes = []
    real_eigh = torch.linalg.eigh

    def eigh(x):
        sizes.append(x.shape[-1])
        return real_eigh(x)

    monkeypatch.setattr(torch.linalg, "eigh", eigh)
    rng = np.random.default_rng(4)
    trees = [graph(20, [(i, int(rng.integers(i))) for i in range(1, 20)]) for _ in range(30)]
    res = compute_pse_tensors(trees, ["LapPE"], num_workers=1)
    assert sizes and max(sizes) <= 10
    for i, g in enumerate(trees):  # repeated eigenvalues: equal up to the basis of their eigenspace
        expected = ref.ref_lap_pe(ref.dense_adjacency(g))
        assert_lap_pe_equivalent(res.node["LapPE"][20 * i:20 * (i + 1)].numpy(), expected, sym_spectrum(g))
    sizes.clear()
    stars = [star(19), star(19)]
    res = compute_pse_tensors(stars, ["LapPE", "EigVals"], num_workers=1)
    assert 20 in sizes  # the fallback
    np.testing.assert_allclose(res.graph["EigVals"][0].numpy(), ref.ref_eigvals(ref.dense_adjacency(stars[0])),
                               atol=1e-7)


def test_uncovered():
    pad = PAD_EIGVAL
    lam = np.array([
        [0.0, 0.1, 0.2, 0.3, 0.4, pad],    # p = 5: the zero and 4 kept eigenvalues inside -> covered
        [0.0, 0.1, 0.2, 0.3, pad, pad],    # p = 4: the 4th kept eigenvalue is missing
        [0.0, 0.1, 0.2, 0.3, 0.995, pad],  # a kept eigenvalue with sigma < SIGMA_MIN
        [0.0, 0.1, 0.2, 0.3, 0.3, 0.3],    # the cluster of the last kept one continues, inside p = 6
        [0.0, 0.1, 0.2, 0.3, 0.3, 0.995],  # ... and ends at a pair with sigma < SIGMA_MIN
        [0.0, 0.0, 0.1, 0.2, 0.3, 0.4],    # two zero eigenvalues (two components)
        [0.0, 0.0, 0.1, 0.2, 0.3, pad],    # ... and one pair too few
    ])
    lam[4, 5] = 0.3 + 1e-9  # within the cluster tolerance of 0.3, so part of the cluster
    lam[4, 5] = 0.3 + 1e-9
    p = np.array([5, 4, 5, 6, 6, 6, 5])
    assert uncovered(lam, p, 4, 1e-6, 1e-8).tolist() == [False, True, True, False, False, False, True]
    lam[4, 5] = 0.995  # the cluster ends at 0.3; the next pair is too close to 1 but not needed
    assert not uncovered(lam, p, 4, 1e-6, 1e-8)[4]
    lam[4, 4] = lam[4, 5] = 0.995 - 1e-9  # now the kept 4th eigenvalue itself is too close to 1
    assert uncovered(lam, p, 4, 1e-6, 1e-8)[4]
    assert uncovered(lam[:, :0], p, 4, 1e-6, 1e-8).all()


def test_needed_columns():
    lam = np.array([[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
                    [0.0, 0.1, 0.2, 0.3, 0.4, 0.4, 0.6],   # repeated 4th kept eigenvalue
                    [0.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.6],   # two components
                    [0.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]])  # cluster to the end
    assert needed_columns(lam, 4, 1e-6, 1e-8).tolist() == [5, 6, 6, 7]
    assert needed_columns(lam[:, :3], 4, 1e-6, 1e-8).tolist() == [3, 3, 3, 3]  # fewer than needed: all


def test_dense_batch_without_collection_uses_full_decomposition():
    batch = DenseBatch(torch.zeros(2, 4, 4, dtype=torch.float64))
    assert batch._gram_split is None
