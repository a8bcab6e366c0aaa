"""Random connected regular graphs (``data.synthetic.connected_regular_edges``) and their use as extra
pretraining graphs (``train.graph_sources.add_regular_graphs``, recipe key ``data.regular_graphs``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpse_dgl.data.synthetic import connected_regular_edges, undirected_graph
from gpse_dgl.train.pretraining import graph_sources
from gpse_dgl.train.pretraining.graph_sources import _skeleton_key, add_regular_graphs
from gpse_dgl.utils.graph import graph_simple_edges, simple_edges


def components(n, u, v) -> int:
    parent = list(range(n))

    def find(a):
        while parent[a] != a:
            a = parent[a]
        return a

    for a, b in zip(u.tolist(), v.tolist()):
        parent[find(a)] = find(b)
    return len({find(a) for a in range(n)})


@pytest.mark.parametrize("num_nodes,degree", [(8, 3), (41, 4), (12, 5), (20, 7), (64, 3), (5, 4)])
def test_regular_edges_are_simple_connected_and_regular(num_nodes, degree):
    rng = np.random.default_rng(num_nodes * degree)
    for _ in range(5):
        n, u, v = connected_regular_edges(num_nodes, degree, rng)
        assert n == num_nodes and len(u) == num_nodes * degree // 2
        assert len(simple_edges(u, v, n)[0]) == len(u)  # no self-loop, no repeated edge
        assert np.bincount(np.concatenate([u, v]), minlength=n).tolist() == [degree] * n
        assert components(n, u, v) == 1


def test_regular_edges_are_seeded_and_bad_sizes_are_refused():
    first = connected_regular_edges(30, 4, np.random.default_rng(7))
    again = connected_regular_edges(30, 4, np.random.default_rng(7))
    other = connected_regular_edges(30, 4, np.random.default_rng(8))
    assert all(np.array_equal(a, b) for a, b in zip(first[1:], again[1:]))
    assert not all(np.array_equal(a, b) for a, b in zip(first[1:], other[1:]))
    for n, d in ((9, 3), (4, 4), (6, 0)):
        with pytest.raises(ValueError, match=f"no {d}-regular simple graph on {n} nodes"):
            connected_regular_edges(n, d, np.random.default_rng(0))


def test_added_graphs_are_training_only_regular_new_and_seeded():
    from gpse_dgl.data.molecules import load_embedded_molecules

    graphs = load_embedded_molecules()[:100]
    split = torch.tensor([0] * 80 + [1] * 10 + [2] * 10)
    out, codes, stats = add_regular_graphs(graphs, split, 0.5, seed=3)
    assert stats["added"] == stats["wanted"] == 40 and len(out) == 140
    assert torch.equal(codes[:100], split) and bool((codes[100:] == 0).all())
    low, high = graph_sources.REGULAR_NODES
    for graph in out[100:]:
        degrees = graph.in_degrees()
        assert low <= graph.num_nodes() <= high and graph.num_edges() == int(degrees.sum())
        assert 3 <= int(degrees[0]) <= 5 and bool((degrees == degrees[0]).all())  # the default degrees
    keys = [_skeleton_key(g.num_nodes(), *graph_simple_edges(g)) for g in out]
    assert len(set(keys)) == len(keys)
    again, _, _ = add_regular_graphs(graphs, split, 0.5, seed=3)
    assert [_skeleton_key(g.num_nodes(), *graph_simple_edges(g)) for g in again] == keys
    other, _, _ = add_regular_graphs(graphs, split, 0.5, seed=4)
    assert [_skeleton_key(g.num_nodes(), *graph_simple_edges(g)) for g in other[100:]] != keys[100:]


def test_a_held_out_regular_graph_is_never_added():
    """Only five connected cubic graphs have 8 nodes. With the cube held out for validation, at most the
    other four can be added, however many are asked for: the draws give up instead of leaking it."""
    square = np.array([0, 1, 2, 3])
    cube = undirected_graph(8, np.concatenate([square, square + 4, square]),
                            np.concatenate([(square + 1) % 4, (square + 1) % 4 + 4, square + 4]))
    ring = undirected_graph(8, np.arange(8), (np.arange(8) + 1) % 8)
    out, codes, stats = add_regular_graphs([ring, cube, ring], torch.tensor([0, 1, 2]), 10.0, seed=0,
                                           nodes=(8, 8), degrees=(3, 3))
    assert stats["wanted"] == 10 and stats["added"] == 4 and stats["attempts"] == 200
    cube_key = _skeleton_key(8, *graph_simple_edges(cube))
    added = {_skeleton_key(8, *graph_simple_edges(g)) for g in out[3:]}
    assert len(added) == 4 and cube_key not in added


def test_recipe_key_adds_graphs_and_changes_the_cache(tmp_path):
    from gpse_dgl.train.pretraining.schema import validate_pretrain_recipe
    from gpse_dgl.train.pretraining.data import build_pretraining_data, data_fingerprint

    def data_recipe(regular, scaling="none"):
        return validate_pretrain_recipe({"data": {"max_graphs": 30, "cache_dir": str(tmp_path), "split": [0.8, 0.1, 0.1],
                                         "regular_graphs": regular, "graph_target_scaling": scaling}}, "test")["data"]

    plain = build_pretraining_data(data_recipe(0.0), log=lambda m: None)
    messages = []
    extra = build_pretraining_data(data_recipe(0.5), log=messages.append)
    assert data_fingerprint(data_recipe(0.0)) != data_fingerprint(data_recipe(0.5))
    assert extra.info["cache"] == "written" and extra.info["regular_graphs"]["added"] == 12
    assert any("added 12 random regular training graphs" in m for m in messages)
    assert len(extra.splits["train"]) == len(plain.splits["train"]) + 12
    for name in ("val", "test"):
        assert torch.equal(extra.splits[name].num_nodes, plain.splits[name].num_nodes)
        assert torch.equal(extra.splits[name].node_targets, plain.splits[name].node_targets)
    # cycle counts of the regular graphs are unknown (NaN) to the loss; everything else is known
    graph_names = [name for name, _ in extra.columns[extra.num_node_columns:]]
    cycles = torch.tensor([name == "CycleGE" for name in graph_names])
    train = extra.splits["train"].graph_targets
    assert bool(torch.isnan(train[-12:, cycles]).all()) and bool(torch.isfinite(train[-12:, ~cycles]).all())
    assert bool(torch.isfinite(train[:-12]).all())
    # standardised: the statistics come from the known values, and unknown ones stay unknown
    scaled = build_pretraining_data(data_recipe(0.5, "standardize"), log=lambda m: None)
    assert scaled.info["cache"] == "reused"
    mean, std = scaled.graph_target_scaling["mean"], scaled.graph_target_scaling["std"]
    known_cycles = train[:-12][:, cycles]
    torch.testing.assert_close(mean[cycles], known_cycles.mean(0))
    torch.testing.assert_close(std[cycles], torch.where(known_cycles.std(0) > 1e-8, known_cycles.std(0), 1.0))
    torch.testing.assert_close(mean[~cycles], train[:, ~cycles].mean(0))
    assert bool(torch.isnan(scaled.splits["train"].graph_targets[-12:, cycles]).all())


def test_a_tiny_run_with_regular_graphs_trains_on_finite_losses(tmp_path):
    from gpse_dgl.train.pretraining.schema import validate_pretrain_recipe
    from gpse_dgl.train.pretraining import pretrain

    recipe = validate_pretrain_recipe({
        "data": {"max_graphs": 30, "cache_dir": str(tmp_path / "cache"), "split": [0.8, 0.1, 0.1],
                 "regular_graphs": 1.0, "graph_target_scaling": "standardize"},
        "model": {"dim_hidden": 16, "num_layers": 2, "head_hidden": 8, "graph_head_hidden": 16},
        "general_pipeline": {"num_epochs": 3, "batch_size": 8, "save_path": str(tmp_path / "run"),
                             "num_threads": 1, "optimizer": {"lr": 0.01}, "lr_scheduler": {"warmup_epochs": 0}},
        "device": "cpu"}, "test")
    summary = pretrain(recipe, progress=False)
    losses = [record["train"]["loss"] for record in summary["history"]]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses
    assert summary["final"]["test"]["r2"] == summary["final"]["test"]["r2"]  # scored (not NaN)
