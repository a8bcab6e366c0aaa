"""Every on-disk loader, on tiny fixtures in the source's real layout (tests/fixtures/make_fixtures.py)."""
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

import gpse_dgl  # noqa: F401
import dgl
from gpse_dgl.data._io import DatasetFormatError
from gpse_dgl.data.registry import load_dataset
from gpse_dgl.utils.errors import DatasetNotFoundError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "datasets"
SMILES = ["CCO", "c1ccccc1O", "CC(=O)N", "C1CC1Cl", "OC(=O)c1ccncc1", "C#N"]


@pytest.fixture
def root(tmp_path):
    """A private copy of the fixtures (loaders write caches next to the data)."""
    dst = tmp_path / "data"
    shutil.copytree(FIXTURES, dst)
    return dst


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Loading must never touch the network."""
    def refuse(*args, **kwargs):
        raise AssertionError("a dataset loader tried to open a network connection")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def edge_set(g):
    u, v = g.edges()
    return set(zip(u.tolist(), v.tolist()))


# --------------------------------------------------------------------------------------------------- OGB

def test_ogbg_molhiv(root):
    from ogb.utils import smiles2graph

    ds = load_dataset("ogbg-molhiv", root=root)
    assert len(ds) == 6 and ds.task == "graph" and ds.task_type == "binary" and ds.metric == "rocauc"
    assert ds.num_tasks == 1 and ds.labels.shape == (6, 1) and ds.labels.dtype == torch.float32
    assert ds.labels[:, 0].tolist() == [0, 1, 0, 0, 1, 0]
    assert {k: v.tolist() for k, v in ds.splits.items()} == {"train": [0, 1, 2, 3], "val": [4], "test": [5]}
    assert ds.node_feat_key == "feat" and ds.edge_feat_key == "feat"
    assert ds.info["node_feat_kind"] == "ogb-atom"
    for g, smi in zip(ds.graphs, SMILES):
        ref = smiles2graph(smi)
        assert torch.equal(g.ndata["feat"], torch.from_numpy(ref["node_feat"]))
        assert edge_set(g) == set(zip(*ref["edge_index"].tolist()))  # bidirected like OGB
        assert g.edata["feat"].shape == (g.num_edges(), 3)
    g, y = ds[1]
    assert g.num_nodes() == 7 and y.shape == (1,)


def test_ogbg_matches_ogb_reference_reader(root):
    """Our raw reader gives exactly what ogb's own read_graph_dgl gives on the same files."""
    from ogb.io.read_graph_dgl import read_graph_dgl

    ours = load_dataset("ogbg-moltox21", root=root, cache=False).graphs
    ref = read_graph_dgl(str(root / "ogbg_moltox21" / "raw"), add_inverse_edge=True)
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        assert torch.equal(torch.stack(a.edges()), torch.stack(b.edges()).long())
        assert torch.equal(a.ndata["feat"], b.ndata["feat"]) and torch.equal(a.edata["feat"], b.edata["feat"])


def test_ogbg_missing_labels_are_nan_and_smiles(root):
    ds = load_dataset("ogbg-moltox21", root=root, with_smiles=True)
    assert ds.labels.shape == (6, 12) and ds.num_tasks == 12
    assert torch.isnan(ds.labels[0, 2]) and torch.isnan(ds.labels[4]).all() and ds.labels[1, 2] == 1
    assert ds.info["smiles"] == SMILES


def test_ogbg_cache_is_written_and_reused(root, monkeypatch):
    load_dataset("ogbg-molhiv", root=root)
    assert (root / "ogbg_molhiv" / "processed_gpse_dgl" / "graphs.bin.meta.json").is_file()
    import gpse_dgl.data.ogb as ogb_mod

    def boom(*a, **k):
        raise AssertionError("raw files re-read although the cache is valid")
    monkeypatch.setattr(ogb_mod, "_read_raw_graphs", boom)
    ds = load_dataset("ogbg-molhiv", root=root)
    assert len(ds) == 6 and ds.labels[:, 0].tolist() == [0, 1, 0, 0, 1, 0]


def test_ogbg_processed_dgl_layout(root, tmp_path):
    """Without raw/, OGB's own processed DGL file is read."""
    ds = load_dataset("ogbg-molhiv", root=root, cache=False)
    alt = tmp_path / "alt" / "ogbg_molhiv"
    shutil.copytree(root / "ogbg_molhiv" / "split", alt / "split")
    (alt / "processed").mkdir(parents=True)
    dgl.save_graphs(str(alt / "processed" / "dgl_data_processed"), ds.graphs, {"labels": ds.labels.long()})
    again = load_dataset("ogbg-molhiv", root=tmp_path / "alt")
    assert len(again) == 6 and again.labels.dtype == torch.float32
    assert torch.equal(again.labels, ds.labels)


def test_ogbg_download_name_folder_accepted(root):
    (root / "ogbg_molhiv").rename(root / "hiv")  # the OGB zip's own folder name
    assert len(load_dataset("ogbg-molhiv", root=root)) == 6


def test_ogbn_arxiv_directed(root):
    ds = load_dataset("ogbn-arxiv", root=root)
    g = ds.graph
    assert ds.task == "node" and ds.task_type == "multiclass" and ds.metric == "accuracy" and ds.num_classes == 40
    assert g.num_nodes() == 12 and g.num_edges() == 14  # stored direction only
    assert (1, 0) in edge_set(g) and (0, 1) not in edge_set(g)
    assert g.ndata["feat"].shape == (12, 128) and g.ndata["feat"].dtype == torch.float32
    assert g.ndata["year"].reshape(-1).tolist() == list(range(2010, 2022))
    assert ds.labels.shape == (12,) and ds.labels.dtype == torch.int64
    assert [len(ds.splits[k]) for k in ("train", "val", "test")] == [8, 2, 2]
    assert ds.info["directed"] is True
    graph, labels = ds[0]
    assert graph is g and labels is ds.labels


def test_ogbn_proteins_bidirected(root):
    ds = load_dataset("ogbn-proteins", root=root)
    g = ds.graph
    assert ds.task_type == "binary" and ds.metric == "rocauc" and ds.num_tasks == 112
    assert g.num_edges() == 22 and (0, 1) in edge_set(g) and (1, 0) in edge_set(g)
    assert g.edata["feat"].shape == (22, 8) and torch.equal(g.edata["feat"][0], g.edata["feat"][1])
    assert ds.labels.shape == (10, 112) and ds.labels.dtype == torch.float32
    assert g.ndata["species"].reshape(-1).tolist() == [3702] * 5 + [4932] * 5
    assert ds.node_feat_key is None and ds.edge_feat_key == "feat"


def test_ogbn_override_inverse_edges(root):
    g = load_dataset("ogbn-arxiv", root=root, add_inverse_edge=True, cache=False).graph
    assert g.num_edges() == 28 and (0, 1) in edge_set(g)


def test_ogb_malformed_raw_is_one_line_error(root):
    (root / "ogbg_molhiv" / "raw" / "num-edge-list.csv.gz").write_bytes(b"garbage")
    with pytest.raises(DatasetFormatError) as exc:
        load_dataset("ogbg-molhiv", root=root, cache=False)
    assert "\n" not in str(exc.value)


# -------------------------------------------------------------------------------------- other families

def test_zinc_subset_and_full(root):
    ds = load_dataset("zinc", root=root)
    assert ds.task_type == "regression" and ds.metric == "mae" and ds.labels.shape == (6, 1)
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 3, "val": 1, "test": 2}
    # train.index = 0,2,3 -> molecules with 4, 6, 7 atoms, targets 0.25*i - 0.5
    assert [g.num_nodes() for g in ds.graphs[:3]] == [4, 6, 7]
    assert torch.allclose(ds.labels[:3, 0], torch.tensor([-0.5, 0.0, 0.25]))
    g = ds.graphs[0]
    assert g.ndata["feat"].shape == (4, 1) and g.ndata["feat"].dtype == torch.int64
    assert g.num_edges() == 8 and set(g.edata["feat"].reshape(-1).tolist()) <= {1, 2, 3}
    assert edge_set(g) == {(a, b) for a, b in edge_set(g)} and (1, 0) in edge_set(g)
    assert len(load_dataset("zinc-full", root=root)) == 8


def test_zinc_pyg_raw_layout(root):
    (root / "ZINC" / "molecules").rename(root / "ZINC" / "raw")
    assert len(load_dataset("zinc", root=root)) == 6


def test_zinc_rejects_malicious_pickle(root):
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("owned",))
    with open(root / "ZINC" / "molecules" / "train.pickle", "wb") as f:
        pickle.dump([Evil()], f)
    with pytest.raises(DatasetFormatError, match="not allowed"):
        load_dataset("zinc", root=root)


def test_peptides_func_pt_layout(root):
    ds = load_dataset("peptides-func", root=root)
    assert ds.task_type == "binary" and ds.metric == "ap" and ds.num_tasks == 10 and ds.labels.shape == (6, 10)
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 3, "val": 1, "test": 2}
    assert ds.graphs[1].ndata["feat"].shape == (7, 9) and ds.info["edge_feat_kind"] == "ogb-bond"
    assert ds.labels[0].tolist() == [float(j % 2) for j in range(10)]


def test_peptides_struct_csv_layout(root):
    ds = load_dataset("peptides-struct", root=root)
    assert ds.task_type == "regression" and ds.metric == "mae" and ds.labels.shape == (6, 11)
    assert torch.allclose(ds.labels.mean(0), torch.zeros(11), atol=1e-5)  # standardised like GraphGPS
    assert ds.splits["train"].tolist() == [0, 1, 2, 3] and ds.splits["test"].tolist() == [5]
    assert ds.graphs[4].num_nodes() == 9 and ds.info["target_names"][0] == "Inertia_mass_a"
    assert (root / "peptides-structural" / "processed_gpse_dgl" / "graphs.bin").is_file()


@pytest.mark.parametrize("name,feat_dim,sizes", [("mnist", 3, (3, 1, 2)), ("cifar10", 5, (2, 1, 1))])
def test_superpixels(root, name, feat_dim, sizes):
    ds = load_dataset(name, root=root)
    assert ds.task_type == "multiclass" and ds.num_classes == 10 and ds.labels.dtype == torch.int64
    assert tuple(len(ds.splits[k]) for k in ("train", "val", "test")) == sizes
    g = ds.graphs[0]
    assert g.ndata["feat"].shape == (9, feat_dim) and g.num_edges() == 27 and g.edata["feat"].shape == (27, 1)
    assert torch.equal(g.ndata["feat"][:, -2:], g.ndata["pos"])  # x then pos, as GraphGPS concatenates
    assert ds.labels.tolist() == list(range(sum(sizes)))


def test_exp(root):
    import networkx as nx

    ds = load_dataset("exp", root=root)
    assert len(ds) == 4 and ds.num_classes == 2 and ds.labels.tolist() == [0, 1, 0, 1]
    assert ds.splits == {} and len(ds.folds) == 5
    g = ds.graphs[2]
    assert g.num_nodes() == 10 and g.num_edges() == 22 and g.ndata["feat"].reshape(-1).tolist()[:3] == [0, 1, 0]
    G = nx.Graph(list(edge_set(g)))
    assert sorted(len(c) for c in nx.minimum_cycle_basis(G)) == [6, 6]


def test_exp_malformed(root):
    (root / "EXP" / "raw" / "GRAPHSAT.txt").write_text("3\n2 0\n0 1 1\n")
    with pytest.raises(DatasetFormatError):
        load_dataset("exp", root=root)


def test_pcqm_subset_from_split_files(root):
    ds = load_dataset("pcqm4mv2-subset", root=root)
    assert ds.task_type == "regression" and ds.metric == "mae" and ds.labels.shape == (4, 1)
    assert ds.info["split_source"] == "file" and ds.info["dataset_index"].tolist() == [0, 1, 2, 3]
    assert torch.allclose(ds.labels[:, 0], torch.tensor([3.1, 4.2, 5.3, 6.4]))
    assert {k: v.tolist() for k, v in ds.splits.items()} == {"train": [0, 1], "val": [2], "test": [3]}
    assert ds.graphs[1].num_nodes() == 7


def test_pcqm_graphgps_split_from_split_dict(root):
    shutil.rmtree(root / "pcqm4m-v2" / "subset_split")
    ds = load_dataset("pcqm4mv2-subset", root=root)
    # 3 train molecules all fall in the 150k validation pool; test is OGB's original valid split
    assert ds.info["split_source"] == "graphgps-rng42"
    assert len(ds.splits["train"]) == 0 and len(ds.splits["val"]) == 3 and len(ds.splits["test"]) == 1
    assert ds.info["dataset_index"][-1].item() == 3


def test_graphgps_pcqm_split_sizes():
    from gpse_dgl.data.pcqm import graphgps_pcqm_split

    split_dict = {"train": np.arange(3_378_606), "valid": np.arange(3_378_606, 3_378_606 + 73_545)}
    parts = graphgps_pcqm_split(split_dict, "subset")
    assert [len(parts[k]) for k in ("train", "val", "test")] == [322_860, 50_000, 73_545]
    assert sum(len(v) for v in parts.values()) == 446_405  # the paper's PCQM4Mv2-subset size
    assert not set(parts["train"][:1000].tolist()) & set(parts["val"].tolist())
    full = graphgps_pcqm_split(split_dict, "full")
    assert len(full["train"]) == 3_228_606 and len(full["val"]) == 150_000


# ------------------------------------------------------------------------------------ missing datasets

MISSING = {
    "ogbg-molhiv": "ogbg_molhiv/raw/edge.csv.gz",
    "ogbg-molbace": "ogbg_molbace/raw/edge.csv.gz",
    "ogbn-arxiv": "ogbn_arxiv/raw/edge.csv.gz",
    "ogbn-proteins": "ogbn_proteins/raw/edge.csv.gz",
    "zinc": "ZINC/molecules/train.pickle",
    "peptides-func": "peptides-func/raw/train.pt",
    "peptides-struct": "peptides-struct/raw/train.pt",
    "mnist": "MNIST/raw/MNIST_v2.pt",
    "cifar10": "CIFAR10/raw/CIFAR10_v2.pt",
    "exp": "EXP/raw/GRAPHSAT.txt",
    "pcqm4mv2-subset": "pcqm4m-v2/raw/data.csv.gz",
}


@pytest.mark.parametrize("name", sorted(MISSING))
def test_missing_dataset_one_line_error(tmp_path, name):
    empty = tmp_path / "empty"
    with pytest.raises(DatasetNotFoundError) as exc:
        load_dataset(name, root=empty)
    msg = str(exc.value)
    assert "\n" not in msg
    assert str(empty / MISSING[name]) in msg
    assert "internet" in msg and ("http" in msg or "python -c" in msg)


def test_missing_split_file_names_it(root):
    (root / "ogbg_molhiv" / "split" / "scaffold" / "valid.csv.gz").unlink()
    with pytest.raises(DatasetNotFoundError, match="valid.csv.gz"):
        load_dataset("ogbg-molhiv", root=root, cache=False)


def test_default_root_from_env(monkeypatch, root):
    monkeypatch.setenv("GPSE_DGL_DATA", str(root))
    assert len(load_dataset("zinc")) == 6
