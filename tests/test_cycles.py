"""Exact simple-cycle counts (CycleGE) against closed forms and networkx."""
from math import comb, factorial

import networkx as nx
import numpy as np
import pytest

from gpse_dgl.pse.cycles import count_cycles, two_core_mask
from gpse_dgl.utils.errors import GraphTooLargeError

L = 8


def _edges(G):
    e = np.array(list(G.edges()), dtype=np.int64).reshape(-1, 2)
    return e[:, 0], e[:, 1]


def _count(G, max_length=L, **kw):
    G = nx.convert_node_labels_to_integers(G)
    u, v = _edges(G)
    return count_cycles(G.number_of_nodes(), u, v, max_length=max_length, **kw)[0]


def _nx_count(G, max_length=L):
    """Reference: networkx's bounded simple-cycle enumeration (undirected, lengths >= 3) + edge count."""
    out = np.zeros(max_length - 1, dtype=np.int64)
    out[0] = G.number_of_edges()
    for c in nx.simple_cycles(nx.Graph(G), length_bound=max_length):
        if len(c) >= 3:
            out[len(c) - 2] += 1
    return out


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8, 9])
def test_complete_graph_closed_form(n):
    want = [comb(n, 2)] + [comb(n, k) * factorial(k - 1) // 2 for k in range(3, L + 1)]
    assert _count(nx.complete_graph(n)).tolist() == want


@pytest.mark.parametrize("n", [3, 5, 8, 9, 20])
def test_cycle_graph(n):
    want = np.zeros(L - 1, dtype=np.int64)
    want[0] = n
    if n <= L:
        want[n - 2] = 1
    assert _count(nx.cycle_graph(n)).tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(5))
def test_trees_have_no_cycles(seed):
    T = nx.random_labeled_tree(60, seed=seed) if hasattr(nx, "random_labeled_tree") else nx.random_tree(60, seed=seed)
    got = _count(T)
    assert got[0] == 59 and not got[1:].any()
    assert not two_core_mask(60, *_edges(T)).any()


def test_empty_inputs():
    e = np.empty(0, dtype=np.int64)
    assert count_cycles(0, e, e).tolist() == [[0] * (L - 1)]
    assert count_cycles(5, e, e, num_graphs=2, node_graph=[0, 0, 1, 1, 1]).shape == (2, L - 1)
    assert not count_cycles(5, e, e).any()


def test_input_is_canonicalised():
    # Triangle given with both directions, a duplicate and a self-loop.
    u = np.array([0, 1, 1, 2, 2, 0, 0, 1])
    v = np.array([1, 0, 2, 1, 0, 2, 1, 1])
    assert count_cycles(3, u, v).tolist() == [[3, 1, 0, 0, 0, 0, 0]]


def test_two_core_mask():
    # Triangle 0-1-2 with a pendant chain 2-3-4 and an isolated node 5.
    u, v = np.array([0, 1, 0, 2, 3]), np.array([1, 2, 2, 3, 4])
    assert two_core_mask(6, u, v).tolist() == [True, True, True, False, False, False]
    # A long chain between two cycles stays in the core; a long pendant chain does not.
    G = nx.cycle_graph(4)
    nx.add_path(G, [3] + list(range(4, 300)))
    nx.add_cycle(G, [299, 300, 301])
    nx.add_path(G, [0] + list(range(302, 500)))
    mask = two_core_mask(500, *_edges(G))
    assert mask[:302].all() and not mask[302:].any()


@pytest.mark.parametrize("max_length", [3, 4, 6, 8, 10])
def test_random_graphs_match_networkx(max_length):
    rng = np.random.default_rng(max_length)
    big = max_length <= 8  # networkx gets slow on dense graphs with long cycles
    for _ in range(60 if big else 20):
        n = int(rng.integers(1, 22 if big else 14))
        p = float(rng.uniform(0.05, 0.45 if big else 0.3))
        G = nx.gnp_random_graph(n, p, seed=int(rng.integers(2**31)))
        assert _count(G, max_length).tolist() == _nx_count(G, max_length).tolist(), (n, p)


def test_structured_graphs_match_networkx():
    graphs = [nx.petersen_graph(), nx.dodecahedral_graph(), nx.grid_2d_graph(5, 6), nx.hypercube_graph(4),
              nx.circular_ladder_graph(7), nx.wheel_graph(9), nx.complete_bipartite_graph(3, 5),
              nx.barbell_graph(5, 3), nx.random_regular_graph(3, 30, seed=1)]
    for G in graphs:
        G = nx.convert_node_labels_to_integers(G)
        assert _count(G).tolist() == _nx_count(G).tolist()


def _batch(graphs):
    us, vs, ng, off = [], [], [], 0
    for i, G in enumerate(graphs):
        u, v = _edges(G)
        us.append(u + off)
        vs.append(v + off)
        ng.append(np.full(G.number_of_nodes(), i))
        off += G.number_of_nodes()
    return off, np.concatenate(us), np.concatenate(vs), np.concatenate(ng)


def _nx_from_dgl(g):
    G = nx.Graph()
    G.add_nodes_from(range(g.num_nodes()))
    s, d = g.edges()
    G.add_edges_from(zip(s.tolist(), d.tolist()))
    return G


def test_molecules_match_networkx_and_batching():
    from gpse_dgl.data.molecules import load_embedded_molecules

    mols = load_embedded_molecules()
    rng = np.random.default_rng(0)
    pick = rng.choice(len(mols), size=150, replace=False)
    graphs = [_nx_from_dgl(mols[i]) for i in pick]
    n, u, v, ng = _batch(graphs)
    batched = count_cycles(n, u, v, ng, len(graphs))
    ref = np.stack([_nx_count(G) for G in graphs])
    np.testing.assert_array_equal(batched, ref)
    assert ref[:, 4].sum() > 30  # molecules have many 6-rings: the check is not vacuous


def test_batched_equals_one_by_one_with_components():
    rng = np.random.default_rng(7)
    graphs = []
    for _ in range(40):
        # several components per graph, isolated nodes included
        G = nx.disjoint_union_all([nx.gnp_random_graph(int(rng.integers(1, 12)), 0.35,
                                                       seed=int(rng.integers(2**31))) for _ in range(3)])
        graphs.append(G)
    graphs.append(nx.empty_graph(4))
    n, u, v, ng = _batch(graphs)
    batched = count_cycles(n, u, v, ng, len(graphs))
    single = np.stack([_count(G) for G in graphs])
    np.testing.assert_array_equal(batched, single)
    np.testing.assert_array_equal(single, np.stack([_nx_count(G) for G in graphs]))


def test_embedded_molecules_need_little_work():
    """The batched count of RDKit's 3,071 embedded skeletons stays within a small work bound (it needs about
    62,000 node pairs and paths; the default limit is 50 million): a change that made counting scale worse
    fails here, on a clock-free measure."""
    from gpse_dgl.data.molecules import load_embedded_molecules

    mols = load_embedded_molecules()
    us, vs, ng, off = [], [], [], 0
    for i, g in enumerate(mols):
        s, d = g.edges()
        us.append(s.numpy() + off)
        vs.append(d.numpy() + off)
        ng.append(np.full(g.num_nodes(), i))
        off += g.num_nodes()
    args = (off, np.concatenate(us), np.concatenate(vs), np.concatenate(ng), len(mols))
    counts = count_cycles(*args, max_paths=100_000)
    assert counts.shape == (len(mols), L - 1)
    assert counts[:, 0].sum() == args[1].shape[0] // 2
    np.testing.assert_array_equal(counts, count_cycles(*args))  # the bound changes nothing else


def test_max_paths_error():
    with pytest.raises(GraphTooLargeError, match="max_paths"):
        _count(nx.complete_graph(30), max_paths=10_000)
    # The same graph within the limit is fine.
    assert _count(nx.complete_graph(8), max_paths=20_000)[-1] == factorial(7) // 2


def test_bad_arguments():
    with pytest.raises(ValueError):
        count_cycles(3, [0], [1], max_length=1)
    with pytest.raises(ValueError):
        count_cycles(3, [0], [1], node_graph=[0, 0])
    assert count_cycles(3, [0, 1, 0], [1, 2, 2], max_length=2).tolist() == [[3]]
