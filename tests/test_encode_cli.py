"""``gpse-dgl encode``: SMILES / DGL binary / dataset inputs, output file, one-line errors."""
from __future__ import annotations

import pytest
import torch

import dgl

from _cli import run_cli
from gpse_dgl.encode import encode, load_gpse
from gpse_dgl.encode.models import DEFAULT_MODEL
from gpse_dgl.nn.gpse import GPSE

SMILES = ["CCO", "c1ccccc1", "not-a-smiles", "CC(=O)Nc1ccc(O)cc1", "C1CC1C(=O)O"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    encoder = GPSE(dim_hidden=16, num_layers=3).eval()
    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    torch.save({"model_state": encoder.state_dict(), "model_config": encoder.to_config()}, path)
    return path


_run = run_cli


def test_encode_smiles_to_dgl_binary(tmp_path, checkpoint, capsys):
    smi = tmp_path / "mols.smi"
    smi.write_text("\n".join(SMILES) + "\n")
    out = tmp_path / "mols_gpse.bin"
    code, _, err = _run(["encode", "--smiles", str(smi), "--checkpoint", str(checkpoint), "--out", str(out),
                         "--seed", "3"], capsys)
    assert code == 0, err
    assert "1 invalid skipped" in err and "graphs/s" in err and str(checkpoint) in err
    graphs, labels = dgl.load_graphs(str(out))
    assert len(graphs) == 4 and labels["smiles_index"].tolist() == [0, 1, 3, 4]
    model = load_gpse(checkpoint)
    for g in graphs:
        assert g.ndata["gpse"].shape == (g.num_nodes(), 16)
        expected = encode(model, dgl.graph(g.edges(), num_nodes=g.num_nodes()), seed=3)
        torch.testing.assert_close(g.ndata["gpse"], expected, rtol=0, atol=1e-6)


def test_encode_dgl_input_keeps_graphs_and_labels(tmp_path, checkpoint, capsys):
    graphs = [dgl.graph(([0, 1, 2], [1, 2, 0])), dgl.graph(([0], [1]), num_nodes=3)]
    graphs[0].ndata["feat"] = torch.ones(3, 2)
    src = tmp_path / "in.bin"
    dgl.save_graphs(str(src), graphs, {"y": torch.tensor([1.0, 2.0])})
    out = tmp_path / "out.bin"
    code, _, err = _run(["encode", "--input", str(src), "--checkpoint", str(checkpoint), "--out", str(out),
                         "--samples", "2", "--batch-size", "1"], capsys)
    assert code == 0, err
    loaded, labels = dgl.load_graphs(str(out))
    assert torch.equal(labels["y"], torch.tensor([1.0, 2.0]))
    assert loaded[0].num_edges() == 3  # the stored graph is the input graph (directed), not its symmetrisation
    assert torch.equal(loaded[0].ndata["feat"], torch.ones(3, 2))
    assert loaded[1].ndata["gpse"].shape == (3, 16)


def test_encode_registered_dataset_sampled(tmp_path, checkpoint, capsys):
    out = tmp_path / "wl.bin"
    code, _, err = _run(["encode", "--dataset", "csl", "--checkpoint", str(checkpoint), "--out", str(out),
                         "--sampled", "--fanouts", "4,2", "--batch-size", "64"], capsys)
    assert code == 0, err
    graphs, _ = dgl.load_graphs(str(out))
    assert len(graphs) > 0 and all(g.ndata["gpse"].shape[1] == 16 for g in graphs)


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "no-such-dataset"], "unknown dataset 'no-such-dataset'; available: "),
    (["--dataset", "ogbg-molhiv", "--root", "{tmp}/empty"], "not found: expected {tmp}/empty"),
])
def test_dataset_errors_are_one_line(tmp_path, checkpoint, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, _, err = _run(["encode", *argv, "--checkpoint", str(checkpoint), "--out", str(tmp_path / "o.bin")],
                        capsys)
    lines = [line for line in err.splitlines() if line.startswith("gpse-dgl: error:")]
    assert code == 2 and len(lines) == 1 and message.replace("{tmp}", str(tmp_path)) in lines[0]
    assert "Traceback" not in err
    if "available" in message:
        assert "embedded-molecules" in lines[0]


def test_bad_checkpoint_is_one_line(tmp_path, capsys):
    smi = tmp_path / "m.smi"
    smi.write_text("CCO\n")
    bogus = tmp_path / "bogus.pt"
    bogus.write_text("not a checkpoint")
    for path, message in ((bogus, "not a GPSE checkpoint"), (tmp_path / "none.pt", "checkpoint not found")):
        code, _, err = _run(["encode", "--smiles", str(smi), "--checkpoint", str(path), "--out",
                             str(tmp_path / "o.bin")], capsys)
        assert code == 2 and err.strip().startswith("gpse-dgl: error:") and message in err
        assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    ([], "exactly one of --dataset, --input, --smiles"),
    (["--dataset", "csl", "--smiles", "{smi}"], "got --dataset, --smiles"),
    (["--dataset", "csl", "--fanouts", "5"], "--fanouts only applies with --sampled"),
    (["--dataset", "csl", "--sampled", "--fanouts", "5,x"], "comma-separated integers"),
])
def test_usage_errors(tmp_path, checkpoint, capsys, argv, message):
    smi = tmp_path / "m.smi"
    smi.write_text("CCO\n")
    argv = [a.replace("{smi}", str(smi)) for a in argv]
    code, _, err = _run(["encode", *argv, "--checkpoint", str(checkpoint), "--out", str(tmp_path / "o.bin")],
                        capsys)
    assert code == 2 and message in err


def test_help_has_an_example(capsys):
    code, out, _ = _run(["encode", "--help"], capsys)
    assert code == 0 and "gpse-dgl encode --smiles" in out and "--checkpoint" in out


def test_default_checkpoint_is_named(tmp_path, checkpoint, capsys, monkeypatch):
    from gpse_dgl.encode import loading

    smi = tmp_path / "m.smi"
    smi.write_text("CCO\nCCCC\n")
    monkeypatch.setattr(loading, "default_checkpoint_path", lambda: checkpoint)
    code, _, err = _run(["encode", "--smiles", str(smi), "--out", str(tmp_path / "o.bin")], capsys)
    assert code == 0, err
    assert f"model: {checkpoint} (shipped default" in err and DEFAULT_MODEL in err
    monkeypatch.setattr(loading, "default_checkpoint_path", lambda: tmp_path / "absent.pt")
    code, _, err = _run(["encode", "--smiles", str(smi), "--out", str(tmp_path / "o.bin")], capsys)
    assert code == 2 and "shipped default" in err and "--checkpoint" in err


def test_bad_input_file_and_device(tmp_path, checkpoint, capsys):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00not a dgl file at all")
    code, _, err = _run(["encode", "--input", str(junk), "--checkpoint", str(checkpoint), "--out",
                         str(tmp_path / "o.bin")], capsys)
    assert code == 2 and "not a DGL graph file" in err and "Traceback" not in err
    code, _, err = _run(["encode", "--input", str(junk), "--checkpoint", str(checkpoint), "--out",
                         str(tmp_path / "o.bin"), "--device", "nonsense"], capsys)
    assert code == 2 and "--device: expected auto, cpu, cuda, cuda:N or mps, got 'nonsense'" in err
