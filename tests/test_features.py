"""Feature sources for downstream models (gpse_dgl.train.downstream.features): widths, values, seeding, caching."""
from __future__ import annotations

import copy

import dgl
import pytest
import torch

from gpse_dgl.data.synthetic import csl_graph, wl_pair_graphs
from gpse_dgl.pse import compute_pses
from gpse_dgl.train.downstream.schema import default_downstream_recipe
from gpse_dgl.train.downstream.features import (NodeTable, compute_features, load_features, random_features,
                                     source_width)
from gpse_dgl.utils.errors import CheckpointError


@pytest.fixture(scope="module")
def graphs():
    pairs = wl_pair_graphs()
    return [pairs["squares"], pairs["hexagon"], csl_graph(2, 11), dgl.graph(([0], [1]), num_nodes=3)]


@pytest.fixture(scope="module")
def gpse_checkpoint(tmp_path_factory):
    from gpse_dgl.nn.gpse import GPSE

    torch.manual_seed(0)
    model = GPSE(dim_hidden=16, num_layers=2)
    path = tmp_path_factory.mktemp("gpse") / "tiny.pt"
    torch.save({"model_state": model.state_dict(), "model_config": model.to_config()}, path)
    return path


def pe_section(**changes) -> dict:
    section = copy.deepcopy(default_downstream_recipe()["model"]["pe"])
    section.update(changes)
    return section


@pytest.mark.parametrize("source, width", [("none", 0), ("random", 20), ("LapPE-abs", 4), ("RWSE", 20),
                                           ("LapPE+RWSE", 24), ("AllPSE", 62)])
def test_widths_and_shapes(graphs, source, width):
    assert source_width(source) == width
    table = compute_features(graphs, source)
    if source == "none":
        assert table is None
        return
    assert len(table) == len(graphs) and table.dim == width
    assert [table.graph(i).shape for i in range(len(graphs))] == [(g.num_nodes(), width) for g in graphs]
    assert torch.isfinite(table.values).all()


def test_allpse_is_the_six_pses_with_graph_level_broadcast(graphs):
    table = compute_features(graphs, "AllPSE")
    _, graph_level = compute_pses([g.clone() for g in graphs])
    reference, _ = compute_pses([g.clone() for g in graphs])
    widths = {"LapPE": 4, "EigVals": 4, "ElstaticPE": 7, "RWSE": 20, "HKdiagSE": 20, "CycleGE": 7}
    for i, g in enumerate(reference):
        rows, start = table.graph(i), 0
        for name, width in widths.items():
            block = rows[:, start:start + width]
            expected = g.ndata[name] if name in g.ndata else graph_level[name][i].expand(g.num_nodes(), -1)
            assert torch.allclose(block, expected), name
            start += width


def test_gpse_width_needs_the_checkpoint():
    with pytest.raises(ValueError, match="gpse_dim"):
        source_width("GPSE")
    assert source_width("GPSE", gpse_dim=512) == 512
    with pytest.raises(ValueError, match="unknown PE source"):
        source_width("LapPE+")


def test_random_features_are_seeded_per_graph_index(graphs):
    copies = [graphs[0], graphs[0].clone()]
    table = random_features(copies, dim=8, seed=3)
    assert not torch.equal(table.graph(0), table.graph(1))  # identical copies get their own draw
    again = random_features(copies + graphs, dim=8, seed=3)
    assert torch.equal(again.values[: len(table.values)], table.values)  # prefix does not depend on the rest
    other = random_features(copies, dim=8, seed=4)
    assert not torch.equal(other.values, table.values)


def test_gpse_features_match_encode_and_ignore_batch_size(graphs, gpse_checkpoint):
    from gpse_dgl.encode import encode_dataset, load_gpse

    table = compute_features(graphs, "GPSE", checkpoint=str(gpse_checkpoint), gpse_batch_size=1)
    assert table.dim == 16 and table.values.shape[0] == sum(g.num_nodes() for g in graphs)
    bigger = compute_features(graphs, "GPSE", checkpoint=str(gpse_checkpoint), gpse_batch_size=64)
    assert torch.allclose(table.values, bigger.values, atol=1e-6)
    reference = encode_dataset(load_gpse(gpse_checkpoint), graphs, progress=False)
    assert torch.allclose(table.values, torch.cat(reference), atol=1e-6)


def test_node_table_gather_follows_batch_order(graphs):
    table = NodeTable.from_list([torch.full((g.num_nodes(), 2), float(i)) for i, g in enumerate(graphs)])
    gathered = table.gather([2, 0])
    assert gathered.shape[0] == graphs[2].num_nodes() + graphs[0].num_nodes()
    assert gathered[0, 0] == 2 and gathered[-1, 0] == 0


def test_cache_written_reused_and_keyed_by_settings(graphs, tmp_path, gpse_checkpoint):
    first, info = load_features(graphs, "toy", pe_section(source="RWSE"), cache_dir=tmp_path)
    assert info["cache"] == "written" and info["dim"] == 20
    again, info2 = load_features(graphs, "toy", pe_section(source="RWSE"), cache_dir=tmp_path)
    assert info2["cache"] == "reused" and info2["path"] == info["path"]
    assert torch.equal(first.values, again.values) and torch.equal(first.offsets, again.offsets)
    # other graphs under the same name: same file, stale fingerprint -> rebuilt, not reused
    changed, info3 = load_features(graphs[:2], "toy", pe_section(source="RWSE"), cache_dir=tmp_path)
    assert info3["cache"] == "written" and len(changed) == 2
    # GPSE settings are part of the key
    _, g1 = load_features(graphs, "toy", pe_section(source="GPSE", checkpoint=str(gpse_checkpoint)), cache_dir=tmp_path)
    _, g2 = load_features(graphs, "toy", pe_section(source="GPSE", checkpoint=str(gpse_checkpoint), gpse_seed=1),
                          cache_dir=tmp_path)
    assert g1["path"] != g2["path"] and g2["cache"] == "written"


def test_float16_storage(graphs, tmp_path):
    table, _ = load_features(graphs, "toy16", pe_section(source="LapPE-abs", storage="float16"), cache_dir=tmp_path)
    assert table.values.dtype == torch.float16
    full = compute_features(graphs, "LapPE-abs")
    assert torch.allclose(table.values.float(), full.values, atol=1e-3)


def test_missing_gpse_checkpoint_is_one_line(graphs, tmp_path):
    with pytest.raises(CheckpointError) as info:
        load_features(graphs, "toy", pe_section(source="GPSE", checkpoint=str(tmp_path / "nope.pt")),
                      cache_dir=tmp_path)
    assert "nope.pt" in str(info.value) and "\n" not in str(info.value)
