"""The expressivity evaluation: graph families built from definitions (``gpse_dgl.data.families``), the
evaluation-graph detector and ``data.exclude_graphs`` (``gpse_dgl.train.pretraining.graph_sources``), and
``benchmarks/expressivity.py`` (scorer and a smoke run)."""
from __future__ import annotations

import json
import pathlib

import networkx as nx
import numpy as np
import pytest
import torch

from gpse_dgl.data.families import (EVALUATION_SETS, FAMILIES, circulant_graph, circulant_jump_sets,
                                    evaluation_graphs, family_dataset, family_graphs, latin_square_graph,
                                    latin_square_classes, paley_graph, random_latin_square, rook_graph,
                                    shrikhande_graph, srg_parameters)
from gpse_dgl.data.registry import load_dataset
from gpse_dgl.data.synthetic import csl_graph, wl_pair_graphs
from gpse_dgl.train.pretraining.schema import validate_pretrain_recipe
from gpse_dgl.train.pretraining import graph_sources
from gpse_dgl.train.pretraining.data import _data_settings
from gpse_dgl.train.pretraining.graph_sources import (subset_and_split, add_regular_graphs, exclude_evaluation_graphs,
                                          find_evaluation_graphs)
from gpse_dgl.utils.errors import RecipeError
from gpse_dgl.utils.graph import graph_simple_edges, undirected_graph
from _benchmarks import load_benchmark

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "datasets"


def _script():
    return load_benchmark("expressivity")


def _params(g):
    return srg_parameters(g.num_nodes(), *graph_simple_edges(g))


def _nx(g):
    graph = nx.Graph()
    graph.add_nodes_from(range(g.num_nodes()))
    graph.add_edges_from(zip(*(e.tolist() for e in graph_simple_edges(g))))
    return graph


def _relabelled(g, seed=0):
    u, v = graph_simple_edges(g)
    perm = np.random.default_rng(seed).permutation(g.num_nodes())
    return undirected_graph(g.num_nodes(), perm[u], perm[v])


# ---------------------------------------------------------------------------------------------------------
# strongly regular graphs


@pytest.mark.parametrize("q, expected", [(5, (5, 2, 0, 1)), (13, (13, 6, 2, 3)), (17, (17, 8, 3, 4)),
                                         (9, (9, 4, 1, 2)), (49, (49, 24, 11, 12))])
def test_paley_graphs_are_strongly_regular_with_paley_parameters(q, expected):
    assert _params(paley_graph(q)) == expected


def test_paley_graph_refuses_orders_without_a_construction():
    for q in (7, 15, 25):  # 7 = 3 mod 4; 15 not a prime power; 25 = 5**2 with 5 = 1 mod 4
        with pytest.raises(ValueError, match="paley_graph"):
            paley_graph(q)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_rook_graphs_are_lattice_graphs(n):
    assert _params(rook_graph(n)) == (n * n, 2 * (n - 1), n - 2, 2)


def test_shrikhande_shares_the_rook_parameters_but_not_the_graph():
    rook, shrikhande = rook_graph(4), shrikhande_graph()
    assert _params(shrikhande) == _params(rook) == (16, 6, 2, 2)
    assert not nx.is_isomorphic(_nx(rook), _nx(shrikhande))


def test_latin_square_graphs_have_the_latin_square_parameters():
    rng = np.random.default_rng(0)
    for n in (4, 5, 7):
        square = random_latin_square(n, rng)
        assert all(sorted(row) == list(range(n)) for row in np.concatenate([square, square.T]))
        assert _params(latin_square_graph(square)) == (n * n, 3 * (n - 1), n, 6)


def test_latin_square_classes_are_pairwise_non_isomorphic():
    squares = latin_square_classes(5, 2)  # order 5 has exactly two main classes
    graphs = [_nx(latin_square_graph(s)) for s in squares]
    assert not nx.is_isomorphic(*graphs)
    with pytest.raises(ValueError, match="only 2 of 3"):
        latin_square_classes(5, 3, max_draws=30)


# ---------------------------------------------------------------------------------------------------------
# circulants and families


def test_circulant_graph_is_csl_for_one_skip_link():
    for skip in (2, 5):
        assert torch.equal(torch.stack(circulant_graph(41, (1, skip)).edges()), torch.stack(csl_graph(skip).edges()))


def test_circulant_jump_sets_give_distinct_regular_graphs():
    sets = circulant_jump_sets(13, 4, count=3)
    assert sets == [(1, 2), (1, 3), (1, 5)]  # (1, 4) = 4 * (1, 3) mod 13 up to sign; all 15 sets fall in 3 orbits
    graphs = [circulant_graph(13, s) for s in sets]
    assert all(set(g.in_degrees().tolist()) == {4} for g in graphs)
    nxs = [_nx(g) for g in graphs]
    assert not any(nx.is_isomorphic(a, b) for i, a in enumerate(nxs) for b in nxs[i + 1:])
    with pytest.raises(ValueError, match="only"):
        circulant_jump_sets(13, 4, count=4)
    with pytest.raises(ValueError, match="prime"):
        circulant_jump_sets(15, 4)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_each_family_is_one_size_and_degree(name):
    graphs = family_graphs(name)
    assert len(graphs) == (2 if name == "srg-16-6-2-2" else 10)
    sizes = {g.num_nodes() for g in graphs.values()}
    degrees = {d for g in graphs.values() for d in g.in_degrees().tolist()}
    assert len(sizes) == 1 and len(degrees) == 1  # regular, one size: 1-WL sees one graph
    if name.startswith(("srg", "latin")):
        assert len({_params(g) for g in graphs.values()}) == 1


def test_family_dataset_relabels_copies_and_is_registered():
    ds = load_dataset("graph-family", family="srg-16-6-2-2", copies=3, seed=1)
    assert len(ds.graphs) == 6 and ds.labels.tolist() == [0, 0, 0, 1, 1, 1] and ds.num_classes == 2
    assert ds.info["class_names"] == ["rook-4x4", "shrikhande"]
    assert nx.is_isomorphic(_nx(ds.graphs[4]), _nx(shrikhande_graph()))
    assert not torch.equal(torch.stack(ds.graphs[0].edges()), torch.stack(ds.graphs[1].edges()))
    with pytest.raises(KeyError, match="unknown graph family"):
        family_dataset("no-such-family")


# ---------------------------------------------------------------------------------------------------------
# evaluation graphs in a pretraining corpus


def _corpus():
    pairs = wl_pair_graphs()
    path = undirected_graph(6, np.arange(5), np.arange(1, 6))
    star = undirected_graph(7, np.zeros(6, dtype=np.int64), np.arange(1, 7))
    return [path, _relabelled(pairs["hexagon"], 1), star, _relabelled(csl_graph(3), 2), _relabelled(pairs["squares"])]


def test_find_evaluation_graphs_names_graph_and_split_up_to_relabelling():
    found = find_evaluation_graphs(_corpus(), ["wl-pairs", "csl"], torch.tensor([0, 0, 1, 2, 0]))
    assert found == [{"index": 1, "graph": "wl-pairs/hexagon", "split": "train"},
                     {"index": 3, "graph": "csl/csl-skip3", "split": "test"},
                     {"index": 4, "graph": "wl-pairs/squares", "split": "train"}]
    assert find_evaluation_graphs(_corpus(), ["srg-16-6-2-2"]) == []


def test_exclude_graphs_leaves_them_out_before_the_split():
    corpus = _corpus() * 2
    kept, stats = exclude_evaluation_graphs(corpus, ["wl-pairs"])
    assert len(kept) == 6 and stats["removed"] == ["wl-pairs/hexagon", "wl-pairs/squares"] * 2
    data = validate_pretrain_recipe({"data": {"source": "csl", "exclude_graphs": ["wl-pairs", "csl"],
                                     "split": [0.4, 0.3, 0.3]}}, "test")["data"]
    info = {}
    graphs, codes = subset_and_split(corpus, data, info)
    assert len(graphs) == len(codes) == 4 and len(info["excluded_graphs"]["removed"]) == 6
    assert find_evaluation_graphs(graphs, ["wl-pairs", "csl"]) == []


def test_added_regular_graphs_avoid_excluded_graphs():
    # only one graph can be drawn (K4: 3-regular on 4 nodes); avoiding it leaves nothing to add
    path = undirected_graph(3, np.array([0, 1]), np.array([1, 2]))
    split = torch.zeros(1, dtype=torch.int64)
    _, _, stats = add_regular_graphs([path], split, 1.0, seed=0, nodes=(4, 4), degrees=(3, 3))
    assert stats["added"] == 1
    k4 = undirected_graph(4, *np.triu_indices(4, 1))
    _, _, stats = add_regular_graphs([path], split, 1.0, seed=0, avoid=[(4, *graph_simple_edges(k4))],
                                     nodes=(4, 4), degrees=(3, 3))
    assert stats["added"] == 0


def test_exclude_graphs_recipe_key_is_checked_and_fingerprinted():
    with pytest.raises(RecipeError, match="did you mean 'wl-pairs'"):
        validate_pretrain_recipe({"data": {"exclude_graphs": ["wl-pair"]}}, "test")
    plain = validate_pretrain_recipe({}, "test")["data"]
    assert plain["exclude_graphs"] == [] and "exclude_graphs" not in _data_settings(plain)  # old caches stay valid
    excluded = validate_pretrain_recipe({"data": {"exclude_graphs": ["wl-pairs"]}}, "test")["data"]
    assert _data_settings(excluded)["exclude_graphs"] == ["wl-pairs"]
    assert set(evaluation_graphs("wl-pairs")) == {"squares", "triangles", "hexagon", "pentagon"}
    assert {"wl-pairs", "csl", *FAMILIES} == set(EVALUATION_SETS)


# ---------------------------------------------------------------------------------------------------------
# the benchmark


def test_loo_nearest_centroid_on_known_cases():
    score = _script().loo_nearest_centroid
    labels = np.array([0, 0, 1, 1])
    assert score(np.array([[0.0], [0.1], [5.0], [5.1]]), labels) == 1.0
    # worked by hand: 0 and 0.1 right; 0.05 (class 1) nearer class 0; 10 tied between the means -> 1/2
    assert score(np.array([[0.0], [0.1], [0.05], [10.0]]), labels) == pytest.approx(0.625)
    assert score(np.ones((8, 3)), np.repeat(np.arange(4), 2)) == pytest.approx(0.25)  # identical: chance
    with pytest.raises(ValueError, match="at least two"):
        score(np.zeros((3, 1)), np.array([0, 0, 1]))


def test_expressivity_smoke_run(tmp_path, capsys):
    module = _script()
    out, png = tmp_path / "out", tmp_path / "expressivity.png"
    module.main(["--seeds", "2", "--copies", "2", "--csl-copies", "2", "--pair-copies", "2",
                 "--families", "srg-16-6-2-2", "--exp-root", str(FIXTURES), "--corpus", "none",
                 "--out", str(out), "--figure", str(png)])
    text = (out / "expressivity.md").read_text()
    assert text.index("used for design") < text.index("| csl |") < text.index("reported only")
    assert text.index("reported only") < text.index("| exp |") < text.index("| srg-16-6-2-2 |")
    record = json.loads((out / "expressivity.json").read_text())
    rows = {r["name"]: r for r in record["rows"]}
    assert set(rows) == {"csl", "squares-vs-triangles", "hexagon-vs-pentagon", "exp", "srg-16-6-2-2"}
    assert all(len(r["scores"][m]) == 2 for r in rows.values() for m in module.METHODS)
    assert rows["csl"]["scores"]["GPSE x=0"] == pytest.approx([0.1, 0.1])  # zero input: 1-WL-bound, exactly chance
    assert png.is_file()


def test_missing_exp_is_skipped_with_a_line(tmp_path):
    groups, line = _script().exp_groups(tmp_path, 5)
    assert groups is None and line.startswith("EXP: skipped")


def test_in_sample_rows_are_marked():
    module = _script()
    rows = [{"set": "dev", "name": "hexagon-vs-pentagon"}, {"set": "dev", "name": "csl"},
            {"set": "held-out", "name": "srg-16-6-2-2"}]
    module._mark_in_sample(rows, [{"graph": "wl-pairs/hexagon", "split": "train"},
                                  {"graph": "wl-pairs/pentagon", "split": "test"},
                                  {"graph": "srg-16-6-2-2/shrikhande", "split": "val"}])
    assert rows[0]["note"] == "in pretraining data: hexagon (train), pentagon (test)"
    assert "note" not in rows[1] and rows[2]["note"] == "in pretraining data: shrikhande (val)"


def test_precision_methods_differ_from_fp32_only_by_their_rounding():
    """Stored in bf16, pooled encodings move by at most bf16's rounding of the node encodings (2^-8 of each
    value); standardised first, by far less; the bf16 pass is a different computation and is only run."""
    module = _script()
    from gpse_dgl.encode import load_gpse

    model = load_gpse("quickstart")
    graphs = [undirected_graph(6, np.arange(6), (np.arange(6) + 1) % 6), undirected_graph(4, [0, 1, 2], [1, 2, 3])]
    fp32 = module.pooled(model, graphs, "GPSE", seed=1)
    raw = module.pooled(model, graphs, "GPSE bf16 stored", seed=1)
    standardised = module.pooled(model, graphs, "GPSE standardised bf16 stored", seed=1)
    passed = module.pooled(model, graphs, "GPSE bf16 pass", seed=1)
    assert 0 < np.abs(raw - fp32).max() <= 2 ** -8 * np.abs(fp32).max() * 1.01
    assert np.abs(standardised - fp32).max() < np.abs(raw - fp32).max()
    assert passed.shape == fp32.shape and np.isfinite(passed).all()
    with pytest.raises(SystemExit, match="unknown method 'GPSE fp8'"):
        module.main(["--methods", "GPSE,GPSE fp8"])


def test_samples_average_the_encodings_of_independent_draws():
    import dgl
    from gpse_dgl.encode import encode, load_gpse

    module = _script()
    model = load_gpse("quickstart")
    graphs = [undirected_graph(6, np.arange(6), (np.arange(6) + 1) % 6), undirected_graph(4, [0, 1, 2], [1, 2, 3])]
    one = module.pooled(model, graphs, "GPSE", seed=2)
    two = module.pooled(model, graphs, "GPSE", seed=2, samples=2)
    batch = dgl.batch(graphs)
    dim_in = getattr(model, "encoder", model).dim_in
    draws = [torch.cat([torch.randn(g.num_nodes(), dim_in, generator=torch.Generator().manual_seed(
        2 * 100_003 + i + k * 1_000_000_007)) for i, g in enumerate(graphs)]) for k in range(2)]
    nodes = [encode(model, batch, x=x) for x in draws]
    sizes = batch.batch_num_nodes().tolist()
    expected = [torch.stack([p.double().mean(0) for p in n.split(sizes)]).numpy() for n in nodes]
    np.testing.assert_allclose(one, expected[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(two, (expected[0] + expected[1]) / 2, rtol=1e-5, atol=1e-5)
    assert np.abs(two - one).max() > 1e-4  # the second draw is a new one
    np.testing.assert_array_equal(module.pooled(model, graphs, "GPSE x=0", seed=2, samples=3),
                                  module.pooled(model, graphs, "GPSE x=0", seed=2))
