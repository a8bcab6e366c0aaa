"""Cayley graphs of non-cyclic groups (``data.cayley``) and their use as extra pretraining graphs
(``train.pretraining.graph_sources.add_cayley_graphs``, recipe keys ``data.cayley_graphs`` and
``data.added_graph_nodes``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpse_dgl.data.cayley import abelian_group, cayley_edges, dihedral_group, non_cyclic_groups, random_cayley_edges
from gpse_dgl.train.pretraining import graph_sources
from gpse_dgl.train.pretraining.graph_sources import _spectral_key, add_cayley_graphs, add_regular_graphs
from gpse_dgl.utils.errors import RecipeError
from gpse_dgl.utils.graph import graph_simple_edges, simple_edges, undirected_graph


def element_orders(mul: np.ndarray) -> list[int]:
    orders = []
    for g in range(len(mul)):
        power, k = g, 1
        while power != 0:
            power, k = mul[power, g], k + 1
        orders.append(k)
    return orders


def assert_group(mul: np.ndarray, inv: np.ndarray) -> None:
    a = np.arange(len(mul))
    assert (mul[0] == a).all() and (mul[:, 0] == a).all()  # identity
    assert (mul[a, inv] == 0).all() and (mul[inv, a] == 0).all()  # inverses
    assert all(sorted(row) == a.tolist() for row in mul)  # Latin square: every product once per row
    x, y, z = np.meshgrid(a, a, a, indexing="ij")
    assert (mul[mul[x, y], z] == mul[x, mul[y, z]]).all()  # associativity


@pytest.mark.parametrize("orders", [(2, 2), (2, 4), (3, 3), (2, 2, 2), (2, 6)])
def test_abelian_groups_are_groups_and_not_cyclic(orders):
    mul, inv = abelian_group(orders)
    assert len(mul) == np.prod(orders)
    assert_group(mul, inv)
    assert (mul == mul.T).all()
    assert max(element_orders(mul)) == np.lcm.reduce(orders) < len(mul)


@pytest.mark.parametrize("m", [3, 4, 5, 8])
def test_dihedral_groups_are_non_abelian_groups_with_m_reflections(m):
    mul, inv = dihedral_group(m)
    assert len(mul) == 2 * m
    assert_group(mul, inv)
    assert not (mul == mul.T).all()
    orders = element_orders(mul)
    assert orders.count(2) == m + (1 if m % 2 == 0 else 0)  # the reflections, and r^(m/2)
    with pytest.raises(ValueError, match="m >= 3"):
        dihedral_group(2)


def test_listed_groups_are_non_cyclic_distinct_and_of_the_asked_orders():
    groups = non_cyclic_groups(4, 32)
    names = [name for name, _, _ in groups]
    assert len(names) == len(set(names))
    # the known counts of non-cyclic abelian plus dihedral groups (isomorphism classes) of these orders
    count = {n: sum(len(mul) == n for _, mul, _ in groups) for n in (4, 6, 8, 9, 12, 16, 32)}
    assert count == {4: 1, 6: 1, 8: 3, 9: 1, 12: 2, 16: 5, 32: 7}
    for _, mul, inv in groups:
        assert max(element_orders(mul)) < len(mul)
    # a group of prime order is cyclic: none of CSL's (41) or the held-out circulants' orders occurs
    assert non_cyclic_groups(41, 41) == [] and non_cyclic_groups(83, 83) == []


def test_cayley_graphs_are_regular_simple_and_vertex_transitive():
    mul, inv = dihedral_group(6)
    rotation, reflection = 1, 6
    n, u, v = cayley_edges(mul, inv, [rotation, int(inv[rotation]), reflection])
    assert n == 12 and len(u) == 18
    assert len(simple_edges(u, v, n)[0]) == len(u)
    assert np.bincount(np.concatenate([u, v]), minlength=n).tolist() == [3] * n
    edges = {(a, b) for a, b in zip(u.tolist(), v.tolist())}
    for g in range(n):  # left multiplication by any element maps edges onto edges
        mapped = {tuple(sorted((int(mul[g, a]), int(mul[g, b])))) for a, b in edges}
        assert mapped == edges
    with pytest.raises(ValueError, match="inverse-closed"):
        cayley_edges(mul, inv, [rotation])
    with pytest.raises(ValueError, match="identity"):
        cayley_edges(mul, inv, [0, reflection])


def test_random_cayley_graphs_are_connected_seeded_and_none_when_impossible():
    mul, inv = abelian_group((4, 4))
    first = random_cayley_edges(mul, inv, 4, np.random.default_rng(3))
    again = random_cayley_edges(mul, inv, 4, np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    n, u, v = first
    assert np.bincount(np.concatenate([u, v]), minlength=n).tolist() == [4] * n
    assert len(graph_sources.find_evaluation_graphs([undirected_graph(n, u, v)], ["srg-16-6-2-2"])) == 0
    # an odd degree needs an involution, which a group of odd order lacks
    assert random_cayley_edges(*abelian_group((3, 3)), 3, np.random.default_rng(0)) is None
    # Z2^4 needs four generators: three involutions never connect it
    assert random_cayley_edges(*abelian_group((2, 2, 2, 2)), 3, np.random.default_rng(0)) is None


def test_added_cayley_graphs_are_training_only_new_in_range_and_seeded():
    ring = undirected_graph(8, np.arange(8), (np.arange(8) + 1) % 8)
    graphs, split = [ring] * 100, torch.tensor([0] * 80 + [1] * 10 + [2] * 10)
    out, codes, stats = add_cayley_graphs(graphs, split, 0.5, seed=3, nodes=(8, 20))
    assert stats["added"] == stats["wanted"] == 40 and len(out) == 140
    assert torch.equal(codes[:100], split) and bool((codes[100:] == 0).all())
    for graph in out[100:]:
        degrees = graph.in_degrees()
        assert 8 <= graph.num_nodes() <= 20 and graph.num_edges() == int(degrees.sum())
        assert 3 <= int(degrees[0]) <= 5 and bool((degrees == degrees[0]).all())  # the default degrees
        assert graph.num_nodes() not in (11, 13, 17, 19)  # prime orders: only cyclic groups
    keys = [_spectral_key(g.num_nodes(), *graph_simple_edges(g)) for g in out[100:]]
    assert len(set(keys)) == len(keys)
    again, _, _ = add_cayley_graphs(graphs, split, 0.5, seed=3, nodes=(8, 20))
    assert [_spectral_key(g.num_nodes(), *graph_simple_edges(g)) for g in again[100:]] == keys
    other, _, _ = add_cayley_graphs(graphs, split, 0.5, seed=4, nodes=(8, 20))
    assert [_spectral_key(g.num_nodes(), *graph_simple_edges(g)) for g in other[100:]] != keys


def test_a_cayley_graph_already_present_is_never_added_again():
    """The cube is the Cayley graph of Z2^3 with its three generators: with the cube in validation, and the
    only other cubic Cayley graphs of 8 nodes (from Z2 x Z4 and D4) asked for many times over, the draws
    give up instead of adding a copy."""
    square = np.array([0, 1, 2, 3])
    cube = undirected_graph(8, np.concatenate([square, square + 4, square]),
                            np.concatenate([(square + 1) % 4, (square + 1) % 4 + 4, square + 4]))
    out, _, stats = add_cayley_graphs([cube, cube], torch.tensor([0, 1]), 10.0, seed=0, nodes=(8, 8))
    keys = {_spectral_key(8, *graph_simple_edges(g)) for g in out[2:]}
    assert stats["added"] == len(keys) == len(out) - 2 < stats["wanted"]
    assert keys and _spectral_key(8, *graph_simple_edges(cube)) not in keys


def test_regular_graph_sizes_follow_the_node_range():
    ring = undirected_graph(8, np.arange(8), (np.arange(8) + 1) % 8)
    out, _, stats = add_regular_graphs([ring] * 20, torch.zeros(20, dtype=torch.long), 1.0, seed=0, nodes=(6, 12))
    assert stats["added"] == 20 and all(6 <= g.num_nodes() <= 12 for g in out[20:])
    with pytest.raises(RecipeError, match="no non-cyclic group"):
        add_cayley_graphs([ring], torch.zeros(1, dtype=torch.long), 1.0, seed=0, nodes=(5, 5))


def test_added_graph_degrees_follow_the_degree_range():
    ring = undirected_graph(8, np.arange(8), (np.arange(8) + 1) % 8)
    graphs, split = [ring] * 40, torch.zeros(40, dtype=torch.long)
    for add in (add_regular_graphs, add_cayley_graphs):
        out, _, stats = add(graphs, split, 1.0, seed=0, nodes=(18, 40), degrees=(6, 8))
        found = {int(g.in_degrees()[0]) for g in out[40:]}
        assert stats["added"] == 40 and found == {6, 7, 8}, (add.__name__, found)
        assert all(18 <= g.num_nodes() <= 40 for g in out[40:])
    # no degree range means 3 to 5: the same draws as the explicit default
    plain, _, _ = add_regular_graphs(graphs, split, 1.0, seed=0, nodes=(8, 32))
    explicit, _, _ = add_regular_graphs(graphs, split, 1.0, seed=0, nodes=(8, 32), degrees=(3, 5))
    assert [graph_simple_edges(g)[0].tolist() for g in plain] == [graph_simple_edges(g)[0].tolist() for g in explicit]


def test_recipe_keys_add_cayley_graphs_and_change_the_cache(tmp_path):
    from gpse_dgl.train.pretraining.data import _data_settings, build_pretraining_data, data_fingerprint
    from gpse_dgl.train.pretraining.schema import validate_pretrain_recipe

    def data_recipe(**data):
        data = {"max_graphs": 30, "cache_dir": str(tmp_path), "split": [0.8, 0.1, 0.1], **data}
        return validate_pretrain_recipe({"data": data}, "test")["data"]

    # older recipes keep their fingerprints: the default node range is not part of them
    assert "added_graph_nodes" not in _data_settings(data_recipe(regular_graphs=0.5))
    assert "cayley_graphs" not in _data_settings(data_recipe(regular_graphs=0.5))
    assert "added_graph_degrees" not in _data_settings(data_recipe(regular_graphs=0.5, added_graph_degrees=[3, 5]))
    prints = {data_fingerprint(data_recipe(**d)) for d in
              ({}, {"regular_graphs": 0.5}, {"regular_graphs": 0.5, "added_graph_nodes": [8, 32]},
               {"regular_graphs": 0.5, "added_graph_degrees": [3, 8]},
               {"cayley_graphs": 0.5}, {"cayley_graphs": 0.5, "added_graph_nodes": [8, 32]})}
    assert len(prints) == 6
    messages = []
    extra = build_pretraining_data(data_recipe(cayley_graphs=0.5, added_graph_nodes=[8, 16]), log=messages.append)
    added = extra.info["cayley_graphs"]["added"]
    assert added == 12 and any("added 12 random Cayley training graphs" in m for m in messages)
    train = extra.splits["train"]
    assert bool((train.num_nodes[-12:] <= 16).all())
    graph_names = [name for name, _ in extra.columns[extra.num_node_columns:]]
    cycles = torch.tensor([name == "CycleGE" for name in graph_names])
    assert bool(torch.isnan(train.graph_targets[-12:, cycles]).all())  # off scale, as on regular graphs
    assert bool(torch.isfinite(train.graph_targets[-12:, ~cycles]).all())


@pytest.mark.parametrize("key,values,message", [
    ("added_graph_nodes", [3, 10], "4 <= smallest"), ("added_graph_nodes", [20, 10], "smallest <= largest"),
    ("added_graph_nodes", [8.5, 10], "whole numbers"), ("added_graph_nodes", [8], "2"),
    ("added_graph_degrees", [1, 5], "2 <= smallest"), ("added_graph_degrees", [8, 3], "smallest <= largest"),
    ("added_graph_degrees", [3, 4.5], "whole numbers")])
def test_a_bad_range_names_the_key(key, values, message):
    from gpse_dgl.train.pretraining.schema import validate_pretrain_recipe

    with pytest.raises(RecipeError, match=key) as error:
        validate_pretrain_recipe({"data": {key: values}}, "recipe.yaml")
    assert message in str(error.value) and "recipe.yaml" in str(error.value)



def test_cycle_targets_of_added_graphs_are_never_computed(monkeypatch):
    """Added regular and Cayley graphs get NaN cycle targets without counting: a 10-regular graph of 40
    nodes has more short paths than cycle counting holds in memory. The other targets are those of a
    computation over all graphs."""
    from gpse_dgl.train.pretraining import data as data_module

    molecules = [undirected_graph(6, np.arange(6), (np.arange(6) + 1) % 6), undirected_graph(3, [0, 1], [1, 2])]
    square = np.array([0, 1, 2, 3])
    regular = [undirected_graph(8, np.concatenate([square, square + 4, square]),  # the cube
                                np.concatenate([(square + 1) % 4, (square + 1) % 4 + 4, square + 4]))]
    graphs = molecules + regular
    recipe = {"target_device": None}
    calls = []
    real = data_module._compute_targets

    def recorded(part, node_names, graph_names, *args):
        calls.append((len(part), list(graph_names)))
        return real(part, node_names, graph_names, *args)

    monkeypatch.setattr(data_module, "_compute_targets", recorded)
    nodes, graph = ["RWSE"], ["EigVals", "CycleGE"]
    split = data_module._targets_with_unknowns(graphs, nodes, graph, recipe, False, first=2)
    assert calls == [(2, graph), (1, ["EigVals"])]
    whole = real(graphs, nodes, graph, recipe, False)
    eig = len(data_module.target_columns([], ["EigVals"]))
    torch.testing.assert_close(split.node_targets, whole.node_targets)
    torch.testing.assert_close(split.graph_targets[:, :eig], whole.graph_targets[:, :eig])
    torch.testing.assert_close(split.graph_targets[:2], whole.graph_targets[:2])
    assert bool(torch.isnan(split.graph_targets[2:, eig:]).all())
