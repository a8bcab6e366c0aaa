"""Bring your own data: molecule tables, ``data.name: csv`` / ``dgl-bin`` recipes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dgl

from _cli import run_cli
from gpse_dgl.data.registry import load_dataset
from gpse_dgl.data.splits import column_split, scaffold_split
from gpse_dgl.data.tables import read_molecule_table
from gpse_dgl.utils.errors import GPSEError, RecipeError

ROWS = [("CCO", 1.5, "a"), ("c1ccccc1O", 2.0, "b"), ("not-a-smiles", 3.0, "c"), ("CC(=O)N", "", "d"),
        ("C1CC1Cl", 4.5, "e")]


def _run(argv, capsys) -> tuple[int, str]:
    code, out, err = run_cli(argv, capsys)
    return code, out + err


def _table(tmp_path, sep=",", name="mols.csv"):
    path = tmp_path / name
    path.write_text(sep.join(["name", "smiles", "y"]) + "\n"
                    + "".join(sep.join([tag, s, str(y)]) + "\n" for s, y, tag in ROWS))
    return path


@pytest.fixture(scope="module")
def tpsa_csv(tmp_path_factory):
    """200 embedded molecules with RDKit's TPSA, as a user would have them in a CSV."""
    from rdkit import Chem, RDLogger
    from rdkit.Chem import rdMolDescriptors

    from gpse_dgl.data.molecules import embedded_smiles_path, read_smiles_file

    RDLogger.DisableLog("rdApp.*")
    lines = ["id,smiles,tpsa"]
    for text in read_smiles_file(embedded_smiles_path()):
        mol = Chem.MolFromSmiles(text)
        if mol is not None and mol.GetNumBonds():
            lines.append(f"m{len(lines)},{Chem.MolToSmiles(mol)},{rdMolDescriptors.CalcTPSA(mol):.2f}")
        if len(lines) > 200:
            break
    path = tmp_path_factory.mktemp("tpsa") / "tpsa.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_tables_read_csv_tsv_and_sdf(tmp_path):
    csv_table, tsv_table = read_molecule_table(_table(tmp_path)), read_molecule_table(_table(tmp_path, "\t", "m.tsv"))
    for table in (csv_table, tsv_table):
        assert table.smiles[2] == "not-a-smiles" and table.columns["name"][4] == "e"
        assert list(table.numeric_columns()) == ["y"] and torch.isnan(table.numeric_columns()["y"][3])
    from rdkit import Chem

    sdf = tmp_path / "mols.sdf"
    writer = Chem.SDWriter(str(sdf))
    for text, value in (("CCO", 1.0), ("c1ccccc1", 2.5)):
        mol = Chem.MolFromSmiles(text)
        mol.SetProp("activity", str(value))
        writer.write(mol)
    writer.close()
    table = read_molecule_table(sdf)
    assert table.smiles == ["CCO", "c1ccccc1"] and table.numeric_columns()["activity"].tolist() == [1.0, 2.5]
    with pytest.raises(GPSEError, match=r"mols.csv: no column 'SMILES' \(columns: name, smiles, y\)"):
        read_molecule_table(_table(tmp_path), "SMILES")


def test_encode_csv_keeps_numeric_columns_and_reports_records_from_zero(tmp_path, capsys):
    out = tmp_path / "out.bin"
    code, text = _run(["encode", "--smiles", str(_table(tmp_path)), "--smiles-column", "smiles", "--out", str(out)],
                      capsys)
    assert code == 0, text
    assert "1 invalid skipped (record 2, numbered from 0)" in text and "labels kept: y" in text
    graphs, labels = dgl.load_graphs(str(out))
    assert labels["smiles_index"].tolist() == [0, 1, 3, 4] and len(graphs) == 4
    assert labels["y"][[0, 1, 3]].tolist() == [1.5, 2.0, 4.5] and torch.isnan(labels["y"][2])
    assert set(labels) == {"smiles_index", "y"}  # the text column "name" is not a label
    code, text = _run(["encode", "--input", str(out), "--smiles-column", "smiles", "--out", str(out)], capsys)
    assert code == 2 and "--smiles-column only applies with --smiles" in text


def test_splits():
    parts = scaffold_split(["c1ccccc1O", "c1ccccc1N", "c1ccccc1C", "C1CCCCC1O", "CCO", "CCN", "C1CC1"] * 2)
    train, val, test = (set(parts[s].tolist()) for s in ("train", "val", "test"))
    assert not (train & val or train & test or val & test) and len(train | val | test) == 14
    assert {0, 1, 2, 7, 8, 9} <= train  # one scaffold (benzene) is never split up
    assert column_split(["Train", "validation", "TEST", 0, "1.0"], "c")["val"].tolist() == [1, 4]
    with pytest.raises(GPSEError, match="c: row 1: expected train, val, test"):
        column_split(["train", "dev"], "c")


def test_csv_dataset_targets_tasks_and_splits(tmp_path):
    ds = load_dataset("csv", path=_table(tmp_path), target_columns=["y"])
    assert len(ds) == 4 and ds.info["invalid"] == 1 and ds.info["record_index"] == [0, 1, 3, 4]
    assert ds.task_type == "regression" and ds.info["node_feat_kind"] == "ogb-atom"
    path = tmp_path / "cls.csv"
    path.write_text("smiles,active,fold\nCCO,0,train\nCCN,1,train\nCCC,0,valid\nCCCl,1,test\n")
    ds = load_dataset("csv", path=path, split="column:fold")
    assert ds.task_type == "binary" and ds.info["targets"] == ["active"] and ds.splits["test"].tolist() == [3]
    assert load_dataset("csv", path=path, task="regression", split="column:fold").task_type == "regression"
    with pytest.raises(GPSEError, match="no column 'fold2'"):
        load_dataset("csv", path=path, split="column:fold2")
    with pytest.raises(GPSEError, match="column 'fold', record 0: 'train' is not a number"):
        load_dataset("csv", path=path, target_columns=["fold"])


def test_dgl_bin_dataset_graph_and_node_level(tmp_path):
    graphs = [dgl.rand_graph(6, 12, ) for _ in range(10)]
    for g in graphs:
        g.ndata["feat"] = torch.randn(6, 3)
    path = tmp_path / "g.bin"
    dgl.save_graphs(str(path), graphs, {"y": torch.arange(10) % 3, "part": torch.tensor([0] * 6 + [1, 1, 2, 2])})
    ds = load_dataset("dgl-bin", path=path, split="column:part")
    assert ds.task_type == "multiclass" and ds.num_classes == 3 and ds.node_feat_key == "feat"
    assert ds.splits["test"].tolist() == [8, 9]
    one = tmp_path / "one.bin"
    dgl.save_graphs(str(one), [dgl.rand_graph(30, 90)], {"score": torch.randn(30, 2)})
    node = load_dataset("dgl-bin", path=one)
    assert node.task == "node" and node.task_type == "regression" and node.num_tasks == 2
    with pytest.raises(GPSEError, match="labels entries to train on"):
        load_dataset("dgl-bin", path=path)
    with pytest.raises(GPSEError, match="no labels entry 'z'"):
        load_dataset("dgl-bin", path=path, target_columns=["z"])


def test_recipe_keys_are_validated(tmp_path):
    from gpse_dgl.train.downstream.schema import validate_downstream_recipe

    with pytest.raises(RecipeError, match="data.path: data.name csv reads"):
        validate_downstream_recipe({"data": {"name": "csv"}})
    with pytest.raises(RecipeError, match="data.split: expected random, scaffold or column:<name>"):
        validate_downstream_recipe({"data": {"name": "csv", "path": "x.csv", "split": "column:"}})
    with pytest.raises(RecipeError, match="data.task: expected one of auto, regression, classification"):
        validate_downstream_recipe({"data": {"name": "csv", "path": "x.csv", "task": "ranking"}})
    recipe = validate_downstream_recipe({"data": {"name": "dgl:KarateClubDataset"}})
    assert recipe["data"]["split"] == "random" and recipe["data"]["target_columns"] == []
    from gpse_dgl.data.user_data import recipe_data_options

    assert recipe_data_options(recipe["data"]) == {}  # dgl: loaders take no file or target options
    options = recipe_data_options({**recipe["data"], "name": "csv-dir:rings", "split": "column:part"})
    assert options["split"] == "column:part" and "path" not in options  # the directory is in the name


def test_train_on_a_csv_of_smiles_beats_the_mean(tpsa_csv, tmp_path, capsys):
    recipe = tmp_path / "tpsa.yaml"
    recipe.write_text(f"""device: cpu
data: {{name: csv, path: {tpsa_csv}, smiles_column: smiles, target_columns: [tpsa], task: regression,
       split: random, cache_dir: {tmp_path / 'cache'}}}
model: {{name: gine, dim_hidden: 32, num_layers: 2, pe: {{source: RWSE, dim_pe: 8}}}}
general_pipeline: {{num_epochs: 10, batch_size: 16, standardize_targets: true, optimizer: {{lr: 0.005}},
                   lr_scheduler: {{warmup_epochs: 1}}, save_checkpoints: false, num_threads: 1}}
""")
    code, text = _run(["train", str(recipe), "--out", str(tmp_path / "run"), "--no-progress"], capsys)
    assert code == 0, text
    import json

    test_mae = json.loads((tmp_path / "run" / "results.json").read_text())["runs"][0]["test"]
    ds = load_dataset("csv", path=tpsa_csv, target_columns=["tpsa"])
    y = ds.labels[:, 0]
    mean_mae = float((y[ds.splits["test"]] - y[ds.splits["train"]].mean()).abs().mean())
    assert test_mae < 0.6 * mean_mae, (test_mae, mean_mae)


SMALL_MOLECULES = ["C", "O", "N", "[Na+].[Cl-]", "CC", "CCO", "S", "[He]", "CO", "CN", "C=O", "CCN"]


@pytest.fixture(scope="module")
def small_molecules_csv(tmp_path_factory):
    """A table of small molecules, single-atom ones (one node, no edge) and a salt (two lone atoms) among
    them: with batch_size 1 every one of them is a training batch of its own."""
    path = tmp_path_factory.mktemp("small") / "small.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{0.1 * i:.1f}\n" for i, s in enumerate(SMALL_MOLECULES)))
    return path


@pytest.mark.parametrize("source", ["none", "random", "LapPE", "RWSE", "LapPE+RWSE", "AllPSE", "GPSE"])
def test_single_atom_molecules_train_with_every_pe_source(small_molecules_csv, tmp_path, source, capsys):
    """Used to end in `Expected more than 1 value per channel when training` from the PE encoder's
    BatchNorm on a batch holding one single-atom molecule."""
    recipe = tmp_path / "small.yaml"
    recipe.write_text(f"""device: cpu
data: {{name: csv, path: {small_molecules_csv}, target_columns: [y], task: regression, split: random,
       cache_dir: {tmp_path / 'cache'}}}
model: {{name: gine, dim_hidden: 16, num_layers: 1, pe: {{source: {source}, dim_pe: 8}}}}
general_pipeline: {{num_epochs: 1, batch_size: 1, num_seeds: 1, standardize_targets: true,
                   save_checkpoints: false, num_threads: 1}}
""")
    code, text = _run(["train", str(recipe), "--out", str(tmp_path / "run"), "--no-progress"], capsys)
    assert code == 0, text
    import json

    run = json.loads((tmp_path / "run" / "results.json").read_text())["runs"][0]
    assert all(np.isfinite(run[split]) for split in ("train", "val", "test")), run


def _own_recipe(tmp_path, table, extra="") -> str:
    recipe = tmp_path / "own.yaml"
    recipe.write_text(f"""device: cpu
data: {{name: csv, path: {table}, task: regression, cache_dir: {tmp_path / 'cache'}{extra}}}
model: {{name: gine, dim_hidden: 8, num_layers: 1, pe: {{source: none}}}}
general_pipeline: {{num_epochs: 1, batch_size: 8, save_checkpoints: false, num_threads: 1}}
""")
    return str(recipe)


def test_train_reports_every_skipped_record_and_column(tmp_path, capsys):
    """Invalid SMILES and a column that is not a target are named with their record numbers, as encode
    does, instead of only a graph count."""
    path = tmp_path / "own.csv"
    path.write_text("name,smiles,y\n" + "".join(f"m{i},{s},{y}\n" for i, (s, y, _) in enumerate(ROWS * 4)))
    code, text = _run(["train", _own_recipe(tmp_path, path), "--out", str(tmp_path / "run"), "--no-progress"], capsys)
    assert code == 0, text
    line = next(line for line in text.splitlines() if line.startswith("data: "))
    assert "16 graph(s) (4 invalid SMILES skipped: records 2, 7, 12, 17, numbered from 0)" in line, line
    assert "not numbers, not targets: name (record 0: 'm0')" in line, line


def test_a_text_cell_in_a_label_column_is_reported_with_its_record(tmp_path, capsys):
    path = tmp_path / "own.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{'abc' if i == 3 else i}\n" for i, s in
                                            enumerate(["CCO", "CCN", "CCC", "CCCl", "c1ccccc1"])))
    out = tmp_path / "out.bin"
    code, text = _run(["encode", "--smiles", str(path), "--out", str(out)], capsys)
    assert code == 0, text
    assert "not numbers, not kept: y (record 3: 'abc')" in text, text
    code, text = _run(["train", _own_recipe(tmp_path, path), "--out", str(tmp_path / "run")], capsys)
    assert code == 2 and "no numeric column to use as target (not numbers: y (record 3: 'abc'))" in text, text


def test_an_infinite_target_is_refused_before_training_naming_record_and_column(tmp_path, capsys):
    path = tmp_path / "own.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{'1e400' if i == 3 else i}\n" for i, s in
                                            enumerate(["CCO", "not-a-smiles", "CCC", "CCCl", "c1ccccc1"] * 3)))
    code, text = _run(["train", _own_recipe(tmp_path, path), "--out", str(tmp_path / "run")], capsys)
    assert code == 2, text
    assert "column 'y', record 3: '1e400' is not a finite number" in text and text.count("\n") == 1, text
    assert not (tmp_path / "run" / "results.json").exists()
    binary = tmp_path / "own.bin"
    dgl.save_graphs(str(binary), [dgl.rand_graph(4, 6) for _ in range(5)],
                    {"label": torch.tensor([0.0, 1.0, float("-inf"), 2.0, 3.0])})
    with pytest.raises(GPSEError, match=r"target 'label', graph 2: -inf is not a finite number"):
        load_dataset("dgl-bin", path=binary)
