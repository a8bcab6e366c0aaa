"""DGL users: AddGPSE / precompute_gpse, ``dgl:`` datasets, CSVDataset directories."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dgl

from _cli import run_cli
from gpse_dgl.data.registry import load_dataset
from gpse_dgl.encode import AddGPSE, encode, precompute_gpse
from gpse_dgl.encode import precompute as precompute_module
from gpse_dgl.nn.gpse import GPSE
from gpse_dgl.utils.errors import DatasetNotFoundError, GPSEError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "datasets" / "dgl_csv"


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPSE(dim_hidden=16, num_layers=3).eval()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, model):
    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    torch.save({"model_state": model.state_dict(), "model_config": model.to_config()}, path)
    return path


@pytest.fixture(autouse=True)
def dgl_dir(tmp_path, monkeypatch):
    """DGL's default raw_dir in a temporary folder (MiniGC / Karate write nothing elsewhere)."""
    monkeypatch.setenv("DGL_DOWNLOAD_DIR", str(tmp_path / "dgl"))
    return tmp_path / "dgl"


def _run(argv, capsys) -> tuple[int, str]:
    code, out, err = run_cli(argv, capsys)
    return code, out + err


def _minigc(num_graphs=12):
    return dgl.data.MiniGCDataset(num_graphs, 6, 10, seed=1, save_graph=False)


def test_add_gpse_equals_encode_and_composes(model):
    g = dgl.graph(([0, 1, 2, 3], [1, 2, 3, 0]))
    g.ndata["feat"] = torch.ones(4, 2)
    out = dgl.transforms.Compose([AddGPSE(model, seed=5, key="pe")])(g)
    assert out is g and set(g.ndata) == {"feat", "pe"}
    torch.testing.assert_close(g.ndata["pe"], encode(model, dgl.graph(g.edges()), seed=5), rtol=0, atol=0)
    ds = dgl.data.MiniGCDataset(4, 6, 10, seed=1, save_graph=False, transform=AddGPSE(model, samples=2))
    graph, _ = ds[2]
    torch.testing.assert_close(graph.ndata["gpse"], encode(model, ds.graphs[2], samples=2), rtol=0, atol=0)


def test_add_gpse_loads_a_checkpoint_path(checkpoint, model):
    g = dgl.graph(([0, 1], [1, 2]))
    torch.testing.assert_close(AddGPSE(str(checkpoint))(g).ndata["gpse"], encode(model, g), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="precision"):
        AddGPSE(model, precision="fp64")


def test_precompute_equals_add_gpse_graph_by_graph(model):
    ds = _minigc()
    ds.graphs[3].ndata["other"] = torch.zeros(ds.graphs[3].num_nodes())  # mixed node data must not matter
    assert precompute_gpse(ds, model=model, seed=2, batch_size=5) is ds
    add = AddGPSE(model, seed=2, key="expected")
    for g, _ in ds:
        torch.testing.assert_close(g.ndata["gpse"], add(g.clone()).ndata["expected"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("build", ["AddGPSE", "precompute_gpse"])
def test_auto_precision_is_decided_for_the_models_device(build, monkeypatch):
    """Without ``device``, ``"auto"`` precision is decided for where the model is (a CUDA model gets the GPU's
    answer, and the cache key with it), not for the CPU. The model sits on the meta device here, a device that is
    not the CPU on any machine; the decision is recorded and answered as the CPU's, so that the encoding runs."""
    from gpse_dgl.encode import transform as transform_module
    from gpse_dgl.utils.precision import as_precision

    class Decided(Exception):
        pass

    asked = []
    module = transform_module if build == "AddGPSE" else precompute_module

    def stop(*args, **kwargs):
        raise Decided

    def record(precision, device):
        asked.append(torch.device(device))
        return as_precision(precision, "cpu")

    monkeypatch.setattr(module, "as_precision", record)
    model = GPSE(dim_hidden=4, num_layers=2).to("meta")
    if build == "AddGPSE":
        AddGPSE(model, precision="auto")
    else:
        monkeypatch.setattr(precompute_module, "encode_dataset", stop)
        with pytest.raises(Decided):
            precompute_gpse([dgl.graph(([0], [1]))], model=model, precision="auto", cache=False)
    assert asked == [torch.device("meta")]


def test_second_precompute_reads_the_cache(model, tmp_path, monkeypatch):
    first = precompute_gpse(_minigc(), model=model, seed=1, cache=tmp_path, name="minigc")
    assert len(list((tmp_path / "gpse_encodings").glob("*.bin"))) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("encoded again instead of reading the cache")

    monkeypatch.setattr(precompute_module, "encode_dataset", refuse)
    second = precompute_gpse(_minigc(), model=model, seed=1, cache=tmp_path, name="minigc")
    for a, b in zip(first.graphs, second.graphs):
        assert torch.equal(a.ndata["gpse"], b.ndata["gpse"])
    with pytest.raises(AssertionError, match="encoded again"):  # another seed is another cache entry
        precompute_gpse(_minigc(), model=model, seed=2, cache=tmp_path, name="minigc")


def test_dgl_datasets_by_name():
    karate = load_dataset("dgl:KarateClubDataset")
    assert karate.task == "node" and karate.graph.num_nodes() == 34 and karate.num_classes == 2
    minigc = load_dataset("dgl:MiniGCDataset:num_graphs=24:max_num_v=12")
    assert len(minigc) == 24 and minigc.task_type == "multiclass" and minigc.num_classes == 8
    assert max(g.num_nodes() for g in minigc.graphs) <= 12
    assert sum(len(v) for v in minigc.splits.values()) == 24


def test_dgl_dataset_errors_are_one_line(dgl_dir):
    with pytest.raises(GPSEError, match="supported: .*dgl:TUDataset.*dgl:KarateClubDataset") as info:
        load_dataset("dgl:NoSuchDataset")
    with pytest.raises(GPSEError, match="unexpected keyword argument 'bogus'") as bad:
        load_dataset("dgl:MiniGCDataset:bogus=1")
    with pytest.raises(DatasetNotFoundError, match=f"expects {dgl_dir}/MUTAG.zip, fetched from https://") as missing:
        load_dataset("dgl:TUDataset:MUTAG")
    for exc in (info, bad, missing):
        assert "\n" not in str(exc.value)
    assert not (dgl_dir / "MUTAG.zip").exists()


def test_cli_encodes_dgl_datasets_end_to_end(tmp_path, checkpoint, model, capsys):
    for name, count, rows in (("dgl:KarateClubDataset", 1, 34), ("dgl:MiniGCDataset:num_graphs=10", 10, 10)):
        out = tmp_path / "out.bin"
        code, text = _run(["encode", "--dataset", name, "--checkpoint", str(checkpoint), "--out", str(out)], capsys)
        assert code == 0, text
        graphs, labels = dgl.load_graphs(str(out))
        assert len(graphs) == count and len(labels["label"]) == rows  # node labels (Karate), graph labels
        torch.testing.assert_close(graphs[-1].ndata["gpse"], encode(model, graphs[-1]), rtol=0, atol=1e-6)
    code, text = _run(["encode", "--dataset", "dgl:TUDataset:MUTAG", "--checkpoint", str(checkpoint),
                       "--out", str(tmp_path / "x.bin")], capsys)
    last = text.strip().splitlines()[-1]
    assert code == 2 and last.startswith("gpse-dgl: error: dgl:TUDataset:MUTAG: ") and "MUTAG.zip" in last


def test_csv_dir_loads_graph_and_node_labels():
    rings = load_dataset(f"csv-dir:{FIXTURES / 'rings'}", split="column:part")
    assert len(rings) == 12 and rings.task_type == "binary" and rings.node_feat_key == "feat"
    assert rings.labels.reshape(-1).tolist() == [0, 1] * 6
    assert [len(rings.splits[s]) for s in ("train", "val", "test")] == [8, 2, 2]
    club = load_dataset(f"csv-dir:{FIXTURES / 'club'}")
    assert club.task == "node" and club.splits["test"].tolist() == [4, 9]
    assert club.graph.ndata["feat"].shape == (10, 2)


def test_csv_dir_missing_column_names_file_and_column(tmp_path):
    with pytest.raises(GPSEError, match=r"rings/graphs.csv: no column 'y' \(columns: label, part\)"):
        load_dataset(f"csv-dir:{FIXTURES / 'rings'}", target_columns=["y"])
    with pytest.raises(GPSEError, match=r"club/nodes.csv: no column 'y'"):
        load_dataset(f"csv-dir:{FIXTURES / 'club'}", target_columns=["y"])
    with pytest.raises(DatasetNotFoundError, match="no meta.yaml"):
        load_dataset(f"csv-dir:{tmp_path}")


def test_csv_dir_encodes_and_trains(tmp_path, checkpoint, model, capsys):
    out = tmp_path / "rings.bin"
    code, text = _run(["encode", "--dataset", f"csv-dir:{FIXTURES / 'rings'}", "--checkpoint", str(checkpoint),
                       "--out", str(out)], capsys)
    assert code == 0, text
    graphs, labels = dgl.load_graphs(str(out))
    assert len(graphs) == 12 and labels["label"].shape[0] == 12
    torch.testing.assert_close(graphs[5].ndata["gpse"], encode(model, graphs[5]), rtol=0, atol=1e-6)
    assert not any(p.suffix == ".bin" for p in (FIXTURES / "rings").rglob("*"))  # nothing written beside the data

    from gpse_dgl.train.downstream import train_downstream
    from gpse_dgl.train.downstream.schema import validate_downstream_recipe

    recipe = validate_downstream_recipe({
        "device": "cpu",
        "data": {"name": "dgl-csv", "path": str(FIXTURES / "rings"), "split": "column:part",
                 "cache_dir": str(tmp_path / "cache")},
        "model": {"name": "gin", "dim_hidden": 16, "num_layers": 2, "pe": {"source": "GPSE", "dim_pe": 8,
                                                                          "checkpoint": str(checkpoint)}},
        "general_pipeline": {"num_epochs": 2, "batch_size": 4, "save_path": str(tmp_path / "run"),
                             "save_checkpoints": False}})
    summary = train_downstream(recipe, progress=False)
    assert summary["dataset"] == "csv-dir-rings" and summary["runs"][0]["test"] is not None
    assert summary["pe_source"] == "GPSE"


@pytest.mark.parametrize("name, source", [("dgl:KarateClubDataset", "LapPE"),
                                          ("dgl:MiniGCDataset:num_graphs=24", "RWSE"), ("dgl-bin", "random")])
def test_downstream_trains_on_dgl_sources(name, source, tmp_path):
    from gpse_dgl.train.downstream import train_downstream
    from gpse_dgl.train.downstream.schema import validate_downstream_recipe

    data = {"name": name, "cache_dir": str(tmp_path / "cache")}
    if name == "dgl-bin":
        graphs = [dgl.rand_graph(8, 20, ) for _ in range(20)]
        dgl.save_graphs(str(tmp_path / "g.bin"), graphs, {"y": torch.randn(20)})
        data["path"] = str(tmp_path / "g.bin")
    recipe = validate_downstream_recipe({
        "device": "cpu", "data": data,
        "model": {"name": "gin", "dim_hidden": 8, "num_layers": 2, "pe": {"source": source, "dim_pe": 4}},
        "general_pipeline": {"num_epochs": 1, "batch_size": 8, "save_path": str(tmp_path / "run"),
                             "save_checkpoints": False, "num_threads": 1}})
    summary = train_downstream(recipe, progress=False)
    assert summary["pe_source"] == source and len(summary["runs"]) == 1
