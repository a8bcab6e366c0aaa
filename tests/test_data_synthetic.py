"""Synthetic datasets: CSL, 1-WL pairs, stratified k-fold, random generators."""
import networkx as nx
import numpy as np
import pytest
import torch

import gpse_dgl  # noqa: F401
from gpse_dgl.data.registry import load_dataset
from gpse_dgl.data.synthetic import (
    ARXIV_SIZE, CSL_SKIPS, chain_graphs, csl_dataset, csl_graph, cycle_graphs, erdos_renyi_graphs, knn_graphs,
    random_graph, random_regular_graphs, wl_pair_graphs, wl_pairs_dataset)
from gpse_dgl.data.splits import stratified_kfold


def to_nx(g) -> nx.Graph:
    G = nx.Graph()
    G.add_nodes_from(range(g.num_nodes()))
    u, v = g.edges()
    G.add_edges_from(zip(u.tolist(), v.tolist()))
    return G


def is_simple_bidirected(g) -> bool:
    u, v = (x.tolist() for x in g.edges())
    pairs = list(zip(u, v))
    return len(set(pairs)) == len(pairs) and all(a != b for a, b in pairs) and set(pairs) == set(zip(v, u))


# ----------------------------------------------------------------------------------------------- CSL

@pytest.fixture(scope="module")
def csl():
    return csl_dataset(seed=0)


def test_csl_sizes_and_balance(csl):
    assert len(csl) == 150 and csl.num_classes == 10 and csl.task_type == "multiclass"
    assert torch.equal(torch.bincount(csl.labels), torch.full((10,), 15))
    for g in csl.graphs:
        assert g.num_nodes() == 41 and g.num_edges() == 2 * 82
        assert is_simple_bidirected(g)
        assert torch.all(g.in_degrees() == 4)  # 4-regular for every skip length


def test_csl_classes_are_isomorphism_classes(csl):
    first = {c: csl.graphs[int(torch.nonzero(csl.labels == c)[0])] for c in range(10)}
    # members of a class are relabelings of one graph (and actually permuted, not copies)
    for c in range(10):
        a, b = (csl.graphs[int(i)] for i in torch.nonzero(csl.labels == c)[:2, 0])
        assert nx.is_isomorphic(to_nx(a), to_nx(b))
        assert not torch.equal(torch.stack(a.edges()), torch.stack(b.edges()))
    # different skips give non-isomorphic graphs: their adjacency spectra differ
    spectra = [np.round(np.linalg.eigvalsh(nx.to_numpy_array(to_nx(first[c]))), 6) for c in range(10)]
    for i in range(10):
        for j in range(i + 1, 10):
            assert not np.allclose(spectra[i], spectra[j])


@pytest.mark.filterwarnings("ignore:The hashes produced:UserWarning")
def test_csl_is_1wl_indistinguishable(csl):
    hashes = {nx.weisfeiler_lehman_graph_hash(to_nx(csl.graphs[i]), iterations=5) for i in range(0, 150, 15)}
    assert len(hashes) == 1


def test_csl_graph_definition():
    g = to_nx(csl_graph(5))
    for i in range(41):
        assert g.has_edge(i, (i + 1) % 41) and g.has_edge(i, (i + 5) % 41)
    assert CSL_SKIPS == (2, 3, 4, 5, 6, 9, 11, 12, 13, 16)


def test_csl_seeded(csl):
    again = csl_dataset(seed=0)
    other = csl_dataset(seed=1)
    assert all(torch.equal(torch.stack(a.edges()), torch.stack(b.edges())) for a, b in zip(csl.graphs, again.graphs))
    assert not torch.equal(torch.stack(csl.graphs[0].edges()), torch.stack(other.graphs[0].edges()))


def test_csl_folds(csl):
    assert len(csl.folds) == 5
    for fold in csl.folds:
        allidx = torch.cat([fold["train"], fold["val"], fold["test"]]).sort().values
        assert torch.equal(allidx, torch.arange(150))
        # stratified: 15 graphs per class over 5 folds -> 3 per class in test and val
        assert torch.equal(torch.bincount(csl.labels[fold["test"]], minlength=10), torch.full((10,), 3))
        assert torch.equal(torch.bincount(csl.labels[fold["val"]], minlength=10), torch.full((10,), 3))
    tests = torch.cat([f["test"] for f in csl.folds]).sort().values
    assert torch.equal(tests, torch.arange(150))  # every graph is tested exactly once


# ------------------------------------------------------------------------------------ stratified k-fold

def test_stratified_kfold_uneven_and_seeded():
    labels = np.array([0] * 7 + [1] * 4 + [2] * 1)
    folds = stratified_kfold(labels, k=3, seed=3, val=False)
    sizes = [len(f["test"]) for f in folds]
    assert sum(sizes) == 12 and max(sizes) - min(sizes) <= 1
    for f in folds:
        assert set(f) == {"train", "test"}
        assert not set(f["train"].tolist()) & set(f["test"].tolist())
        counts = np.bincount(labels[f["test"].numpy()], minlength=3)
        assert counts[0] in (2, 3) and counts[1] in (1, 2)
    again = stratified_kfold(labels, k=3, seed=3, val=False)
    assert all(torch.equal(a["test"], b["test"]) for a, b in zip(folds, again))
    other = stratified_kfold(labels, k=3, seed=4, val=False)
    assert any(not torch.equal(a["test"], b["test"]) for a, b in zip(folds, other))


def test_stratified_kfold_rejects_too_few_folds():
    with pytest.raises(ValueError):
        stratified_kfold([0, 1, 0, 1], k=2, val=True)


# ----------------------------------------------------------------------------------------- WL pairs

@pytest.mark.filterwarnings("ignore:The hashes produced:UserWarning")
def test_wl_pairs_are_1wl_equivalent_but_not_isomorphic():
    graphs = {k: to_nx(g) for k, g in wl_pair_graphs().items()}
    for a, b in [("squares", "triangles"), ("hexagon", "pentagon")]:
        ga, gb = graphs[a], graphs[b]
        assert ga.number_of_nodes() == gb.number_of_nodes() and ga.number_of_edges() == gb.number_of_edges()
        assert nx.weisfeiler_lehman_graph_hash(ga, iterations=10) == nx.weisfeiler_lehman_graph_hash(gb, iterations=10)
        assert not nx.is_isomorphic(ga, gb)
    # the paper's pair: two hexagons sharing an edge vs two pentagons joined by an edge
    hexa, penta = graphs["hexagon"], graphs["pentagon"]
    assert hexa.number_of_nodes() == 10 and hexa.number_of_edges() == 11
    assert sorted(len(c) for c in nx.minimum_cycle_basis(hexa)) == [6, 6]
    assert sorted(len(c) for c in nx.minimum_cycle_basis(penta)) == [5, 5]
    assert nx.has_bridges(penta) and not nx.has_bridges(hexa)
    assert sorted(len(c) for c in nx.minimum_cycle_basis(graphs["squares"])) == [4, 4]
    assert sorted(len(c) for c in nx.minimum_cycle_basis(graphs["triangles"])) == [3, 3]


def test_wl_pairs_dataset_labels():
    ds = wl_pairs_dataset(copies=20)
    assert len(ds) == 80 and ds.num_classes == 4
    assert torch.equal(torch.bincount(ds.labels), torch.full((4,), 20))
    assert torch.equal(ds.labels, 2 * ds.info["pair"] + ds.info["member"])
    assert ds.info["class_names"] == ["squares", "triangles", "hexagon", "pentagon"]
    assert ds.graphs[40].num_nodes() == 10 and ds.graphs[0].num_nodes() == 6
    assert all(is_simple_bidirected(g) for g in ds.graphs[::20])
    assert len(load_dataset("wl-pairs", copies=2)) == 8


# ------------------------------------------------------------------------------------ random generators

def test_erdos_renyi_seeded_and_density():
    a = erdos_renyi_graphs(20, 60, avg_degree=6.0, seed=1)
    b = erdos_renyi_graphs(20, 60, avg_degree=6.0, seed=1)
    assert all(torch.equal(torch.stack(x.edges()), torch.stack(y.edges())) for x, y in zip(a, b))
    mean_deg = np.mean([g.num_edges() / g.num_nodes() for g in a])
    assert 5.0 < mean_deg < 7.0
    assert all(is_simple_bidirected(g) for g in a)
    with pytest.raises(ValueError):
        erdos_renyi_graphs(1, 10)


def test_erdos_renyi_sparse_path():
    (g,) = erdos_renyi_graphs(1, 5000, p=2e-4, seed=0)  # > 4M pairs: sparse sampler
    assert 0.6 * 2500 < g.num_edges() / 2 < 1.4 * 2500 and is_simple_bidirected(g)


def test_random_graph_exact_counts():
    g = random_graph(2000, 15000, seed=3)
    assert g.num_nodes() == 2000 and g.num_edges() == 30000 and is_simple_bidirected(g)
    d = random_graph(2000, 15000, seed=3, directed=True)
    u, v = (x.numpy() for x in d.edges())
    assert d.num_edges() == 15000 and np.all(u != v)
    assert len(set(zip(np.minimum(u, v).tolist(), np.maximum(u, v).tolist()))) == 15000
    with pytest.raises(ValueError):
        random_graph(4, 7)


def test_random_graph_arxiv_size():
    g = random_graph(*ARXIV_SIZE, seed=0, directed=True)
    assert (g.num_nodes(), g.num_edges()) == (169_343, 1_166_243)


def test_regular_knn_chain_cycle():
    for g in random_regular_graphs(3, 20, 3, seed=0):
        assert torch.all(g.in_degrees() == 3) and is_simple_bidirected(g)
    with pytest.raises(ValueError):
        random_regular_graphs(1, 5, 3)
    (g,) = knn_graphs(1, 30, k=4, seed=0)
    assert torch.all(g.in_degrees() >= 4) and g.ndata["pos"].shape == (30, 2) and is_simple_bidirected(g)
    c, = chain_graphs([5])
    assert c.num_edges() == 8 and sorted(c.in_degrees().tolist()) == [1, 1, 2, 2, 2]
    r, = cycle_graphs([7])
    assert torch.all(r.in_degrees() == 2)


def test_synthetic_node_dataset_registered_small():
    from gpse_dgl.data.synthetic import synthetic_node_dataset

    ds = synthetic_node_dataset("demo", 500, 2000, directed=True, num_feat=8, num_classes=5, seed=0)
    assert ds.task == "node" and ds.graph.num_edges() == 2000 and ds.labels.shape == (500,)
    assert sum(len(v) for v in ds.splits.values()) == 500
    assert ds.graph.ndata["feat"].shape == (500, 8)
