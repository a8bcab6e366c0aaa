"""Registry and GraphDataset container."""
from pathlib import Path

import pytest
import torch

import gpse_dgl  # noqa: F401
from gpse_dgl.data import registry
from gpse_dgl.data.dataset import GraphDataset, random_split
from gpse_dgl.data.registry import (
    UnknownDatasetError, available_datasets, dataset_description, default_root, load_dataset, register_dataset)
from gpse_dgl.utils.errors import GPSEError

EXPECTED = {
    "embedded-molecules", "csl", "wl-pairs", "exp", "erdos-renyi", "synthetic-arxiv", "synthetic-proteins",
    "ogbg-molhiv", "ogbg-molpcba", "ogbg-molbace", "ogbg-molbbbp", "ogbg-molclintox", "ogbg-molmuv",
    "ogbg-molsider", "ogbg-moltox21", "ogbg-moltoxcast", "ogbn-arxiv", "ogbn-proteins", "zinc",
    "pcqm4mv2-subset", "peptides-func", "peptides-struct", "mnist", "cifar10", "graph-family",
}


def test_registered_names():
    names = available_datasets()
    assert EXPECTED <= set(names) and names == sorted(names)
    assert all(dataset_description(n) and "\n" not in dataset_description(n) for n in names)


def test_ogb_names_agree_with_ogb_master():
    from gpse_dgl.data.ogb import ogb_meta

    for name in available_datasets():
        if name.startswith(("ogbg-", "ogbn-")):
            meta = ogb_meta(name)
            assert meta["num tasks"].isdigit()


def test_unknown_name_lists_available():
    with pytest.raises(UnknownDatasetError) as exc:
        load_dataset("no-such-set")
    msg = str(exc.value)
    assert isinstance(exc.value, GPSEError) and "\n" not in msg
    assert "no-such-set" in msg and "csl" in msg and "ogbg-molhiv" in msg


def test_names_are_case_insensitive_and_aliased():
    assert load_dataset("CSL").name == "csl"
    assert load_dataset("WL_PAIRS", copies=1).name == "wl-pairs"


def test_register_custom_loader(tmp_path):
    seen = {}

    def loader(root, value=1):
        seen["root"], seen["value"] = root, value
        return GraphDataset(graphs=[], labels=None, splits={}, name="custom", task_type="none", metric=None)

    register_dataset("Custom-Test", loader, "a test loader")
    try:
        ds = load_dataset("custom-test", root=tmp_path, value=7)
        assert ds.name == "custom" and seen == {"root": tmp_path, "value": 7}
        with pytest.raises(ValueError):
            register_dataset("custom-test", loader, "again")
        register_dataset("custom-test", loader, "replaced", overwrite=True)
        assert dataset_description("custom-test") == "replaced"
    finally:
        registry._REGISTRY.pop("custom-test", None)


def test_default_root(monkeypatch):
    monkeypatch.delenv("GPSE_DGL_DATA", raising=False)
    assert default_root() == Path.home() / ".cache" / "gpse-dgl" / "datasets"
    monkeypatch.setenv("GPSE_DGL_DATA", "~/somewhere")
    assert default_root() == Path.home() / "somewhere"


def test_embedded_molecules():
    ds = load_dataset("embedded-molecules")
    assert len(ds) > 1000 and ds.labels is None and ds.task_type == "none"
    assert sum(len(v) for v in ds.splits.values()) == len(ds)
    g, y = ds[0]
    assert y is None and g.num_edges() > 0


def test_synthetic_arxiv_registered_size():
    ds = load_dataset("synthetic-arxiv")
    assert ds.task == "node" and (ds.graph.num_nodes(), ds.graph.num_edges()) == (169_343, 1_166_243)
    assert ds.graph.ndata["feat"].shape == (169_343, 128) and ds.labels.max() < 40
    assert sum(len(v) for v in ds.splits.values()) == 169_343


# ------------------------------------------------------------------------------------------ GraphDataset

def _toy(n=5):
    import dgl

    graphs = [dgl.graph(([0], [1]), num_nodes=2) for _ in range(n)]
    return GraphDataset(graphs=graphs, labels=torch.arange(n).float().reshape(-1, 1),
                        splits={"train": [0, 1, 2], "test": [3, 4]}, name="toy", task_type="regression",
                        metric="mae")


def test_graph_dataset_indexing_and_subset():
    ds = _toy()
    assert len(ds) == 5 and ds.splits["train"].dtype == torch.long
    g, y = ds[3]
    assert y.tolist() == [3.0]
    sub = ds.subset("test")
    assert len(sub) == 2 and sub.labels[:, 0].tolist() == [3.0, 4.0] and sub.metric == "mae"
    with pytest.raises(KeyError):
        ds.subset("val")
    with pytest.raises(AttributeError):
        ds.graph
    assert "toy" in repr(ds)


def test_graph_dataset_validates():
    import dgl

    with pytest.raises(ValueError):
        GraphDataset(graphs=[dgl.graph(([0], [1]))] * 2, labels=torch.zeros(3), splits={}, name="bad")
    with pytest.raises(ValueError):
        GraphDataset(graphs=[dgl.graph(([0], [1]))] * 2, labels=None, splits={}, name="bad", task="node")
    with pytest.raises(ValueError):
        GraphDataset(graphs=[], labels=None, splits={}, name="bad", task_type="weird")


def test_random_split_partition_and_seed():
    s = random_split(103, (0.8, 0.1, 0.1), seed=1)
    assert sorted(torch.cat(list(s.values())).tolist()) == list(range(103))
    assert [len(s[k]) for k in ("train", "val", "test")] == [82, 10, 11]
    assert torch.equal(s["val"], random_split(103, (0.8, 0.1, 0.1), seed=1)["val"])
    assert not torch.equal(s["val"], random_split(103, (0.8, 0.1, 0.1), seed=2)["val"])
