"""``gpse-dgl pse``: inputs, outputs, normalisation and one-line errors."""
from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

import dgl
from _pse_graphs import complete, cycle, path
from gpse_dgl.cli import cli, main
from gpse_dgl.pse import compute_pses, per_graph_standardize


def run(args):
    result = CliRunner().invoke(cli, ["pse", "--no-progress", *args], catch_exceptions=False)
    return result


def run_main(args, capsys):
    """Through the console entry point, which turns library errors into one line and exit status 2."""
    with pytest.raises(SystemExit) as exc:
        main(["pse", "--no-progress", *args])
    captured = capsys.readouterr()
    return exc.value.code, captured.out + captured.err


def test_smiles_with_invalid_entries(tmp_path):
    smi = tmp_path / "mols.smi"
    smi.write_text("CCO ethanol\nnot_a_smiles\nc1ccccc1\n\nC1CC1C(=O)O\n[Xx]\n")
    out = tmp_path / "pse.bin"
    result = run(["--smiles", str(smi), "--out", str(out)])
    assert result.exit_code == 0, result.output
    # numbered from 0 (blank lines skipped), as labels["smiles_index"] numbers the valid ones: 0, 2, 3
    assert "3 molecules, 2 invalid SMILES skipped (entries 1, 4, numbered from 0 as smiles_index)" in result.output
    graphs, labels = dgl.load_graphs(str(out))
    assert len(graphs) == 3 and [g.num_nodes() for g in graphs] == [3, 6, 6]
    assert labels["smiles_index"].tolist() == [0, 2, 3]
    assert labels["EigVals"].shape == (3, 4) and labels["CycleGE"].shape == (3, 7)
    assert labels["CycleGE"][1].tolist() == [6, 0, 0, 0, 1, 0, 0]  # benzene skeleton: one 6-ring
    for name, dim in (("ElstaticPE", 7), ("LapPE", 4), ("RWSE", 20), ("HKdiagSE", 20)):
        assert graphs[1].ndata[name].shape == (6, dim)
    # default: node-level standardised per graph -> every column has mean 0 within each graph
    for g in graphs:
        assert torch.allclose(g.ndata["RWSE"].mean(0), torch.zeros(20), atol=1e-5)


def test_input_file_keeps_data_and_no_normalize(tmp_path):
    graphs = [cycle(5), path(4), complete(4)]
    graphs[0].ndata["feat"] = torch.arange(5.0)
    src = tmp_path / "in.bin"
    dgl.save_graphs(str(src), graphs, {"y": torch.tensor([1, 2, 3])})
    out = tmp_path / "out.bin"
    result = run(["--input", str(src), "--pse", "RWSE", "--pse", "EigVals,LapPE", "--no-normalize",
                  "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "computed RWSE, EigVals, LapPE for 3 graphs (13 nodes)" in result.output
    loaded, labels = dgl.load_graphs(str(out))
    assert labels["y"].tolist() == [1, 2, 3] and torch.equal(loaded[0].ndata["feat"], torch.arange(5.0))
    expected, graph_level = compute_pses([cycle(5), path(4), complete(4)], ["RWSE", "EigVals", "LapPE"])
    for a, b in zip(loaded, expected):
        torch.testing.assert_close(a.ndata["RWSE"], b.ndata["RWSE"])
        assert "HKdiagSE" not in a.ndata
    torch.testing.assert_close(labels["EigVals"], graph_level["EigVals"])
    # raw, not standardised: cycle RWSE k=2 is 1/2 everywhere
    assert torch.allclose(loaded[0].ndata["RWSE"][:, 0], torch.full((5,), 0.5))


def test_embedded_dataset_normalised_matches_library(tmp_path):
    out = tmp_path / "emb.bin"
    result = run(["--dataset", "embedded-molecules", "--pse", "HKdiagSE", "--out", str(out)])
    assert result.exit_code == 0, result.output
    loaded, _ = dgl.load_graphs(str(out))
    from gpse_dgl.data.molecules import load_embedded_molecules

    raw, _ = compute_pses([g.clone() for g in load_embedded_molecules()[:50]], ["HKdiagSE"])
    counts = [g.num_nodes() for g in raw]
    expected = per_graph_standardize(torch.cat([g.ndata["HKdiagSE"].double() for g in raw]), counts)
    got = torch.cat([g.ndata["HKdiagSE"] for g in loaded[:50]]).double()
    # the CLI standardises the float64 values, this check the stored float32 ones: columns of tiny
    # variance amplify that rounding, hence the looser tolerance
    torch.testing.assert_close(got, expected, atol=2e-4, rtol=0)


def test_usage_errors(tmp_path):
    smi = tmp_path / "x.smi"
    smi.write_text("CCO\n")
    for args in ([], ["--dataset", "embedded-molecules", "--smiles", str(smi)]):
        result = CliRunner().invoke(cli, ["pse", *args])
        assert result.exit_code == 2 and "exactly one of --input, --smiles, --dataset" in result.output
    result = CliRunner().invoke(cli, ["pse", "--dataset", "embedded-molecules", "--pse", "LapPE,Bogus"])
    assert result.exit_code == 2 and "unknown PSE 'Bogus'" in result.output


def test_library_errors_are_one_line(tmp_path, capsys):
    src = tmp_path / "big.bin"
    dgl.save_graphs(str(src), [cycle(30)])
    code, text = run_main(["--input", str(src), "--pse", "ElstaticPE", "--dense-limit", "20"], capsys)
    assert code == 2
    lines = [ln for ln in text.splitlines() if ln.startswith("gpse-dgl: error:")]
    assert len(lines) == 1 and "above dense_limit=20" in lines[0] and "--dense-limit" in lines[0]
    bad = tmp_path / "bad.bin"
    bad.write_text("not a graph file")
    code, text = run_main(["--input", str(bad)], capsys)
    assert code == 2 and "not a DGL graph file" in text
    empty = tmp_path / "none.smi"
    empty.write_text("xx\nyy\n")
    code, text = run_main(["--smiles", str(empty)], capsys)
    assert code == 2 and "no valid SMILES" in text


def test_columns_zeroed_by_normalisation_are_reported(tmp_path, monkeypatch):
    """``pse`` says when normalisation zeroes columns with spread (here, with the tolerance raised so that
    the small graphs' RWSE columns fall below it) instead of writing zeros silently."""
    from gpse_dgl.pse import standardize

    source = tmp_path / "in.bin"
    dgl.save_graphs(str(source), [cycle(7), path(9), complete(5)])
    result = run(["--input", str(source), "--pse", "RWSE", "--out", str(tmp_path / "a.bin")])
    assert result.exit_code == 0 and "normalisation set" not in result.output, result.output
    monkeypatch.setattr(standardize, "VAR_TOL", 1.0)
    result = run(["--input", str(source), "--pse", "RWSE", "--out", str(tmp_path / "b.bin")])
    assert result.exit_code == 0, result.output
    assert "note: normalisation set " in result.output and "--no-normalize keeps them" in result.output
