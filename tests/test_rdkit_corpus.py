"""rdkit-molecules: file discovery, column detection, the hash split, the cache, and pretraining's use of it."""
import gzip

import numpy as np
import pytest
import torch

from gpse_dgl.data import rdkit_corpus
from gpse_dgl.data.molecules import skeleton_smiles
from gpse_dgl.data.rdkit_corpus import (
    find_molecule_files, hash_split_codes, load_rdkit_molecules, read_molecule_file)
from gpse_dgl.data.registry import available_datasets, load_dataset

SDF_RECORD = """ethanol
     RDKit          2D

  3  2  0  0  0  0  0  0  0  0999 V2000
    0.0000    0.0000    0.0000 C   0  0
    1.2990    0.7500    0.0000 C   0  0
    2.5981   -0.0000    0.0000 O   0  0
  1  2  1  0
  2  3  1  0
M  END
$$$$
"""


def _write_package(root):
    """A stand-in package tree: molecule files of every kind, and files that are not molecule sets."""
    (root / "Data" / "sub").mkdir(parents=True)
    (root / "Data" / "first.smi").write_text("c1ccccc1 1\nC1CCC1 2\nCC(C)O 3\n")
    (root / "Data" / "sub" / "ids_first.tsv").write_text("id\tname\tSmiles\nA\tx\tC1CC1C\nB\ty\tCCCCC\n")
    (root / "Data" / "sub" / "second_col.csv").write_text("ZINC1,C1CCCC1CC\nZINC2,CC1CCC1C\n")
    with gzip.open(root / "Data" / "sub" / "ethanol.sdf.gz", "wt") as fh:
        fh.write(SDF_RECORD)
    (root / "Data" / "README.txt").write_text("These files hold SMILES of molecules.\nSee the docs.\n")
    (root / "Data" / "patterns.csv").write_text("name,SMARTS\nacid,C(=O)[OH]\namine,[NX3]\n")
    (root / "Data" / "my_smarts.txt").write_text("CCO\nCCN\n")
    (root / "Data" / "activity.csv").write_text("Name,Act\n1520012,5.48\n1520011,5.1\n")
    (root / "Data" / "notes.md").write_text("CCO\n")
    return root


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = _write_package(tmp_path / "pkg")
    monkeypatch.setattr(rdkit_corpus, "rdkit_package_dir", lambda: root)
    return root


def test_finds_candidates_by_suffix_in_sorted_order(package):
    names = [p.relative_to(package).as_posix() for p in find_molecule_files()]
    assert names == sorted(names) and "Data/notes.md" not in names
    assert {"Data/first.smi", "Data/sub/ethanol.sdf.gz", "Data/README.txt"} <= set(names)


def test_reads_molecule_sets_and_skips_the_rest(package):
    smiles, how = read_molecule_file(package / "Data" / "first.smi")
    assert smiles == ["c1ccccc1", "C1CCC1", "CC(C)O"] and how.startswith("column 1")
    assert read_molecule_file(package / "Data" / "sub" / "ids_first.tsv")[0] == ["C1CC1C", "CCCCC"]
    assert read_molecule_file(package / "Data" / "sub" / "second_col.csv")[0] == ["C1CCCC1CC", "CC1CCC1C"]
    assert skeleton_smiles(read_molecule_file(package / "Data" / "sub" / "ethanol.sdf.gz")[0][0]) == "CCC"
    for skipped in ("README.txt", "patterns.csv", "my_smarts.txt", "activity.csv"):
        smiles, why = read_molecule_file(package / "Data" / skipped)
        assert smiles is None and why, skipped


def test_split_depends_on_the_skeleton_alone():
    rng = np.random.default_rng(0)
    strings = ["C" * int(k) + str(i) for i, k in enumerate(rng.integers(1, 30, 20000))]
    codes = hash_split_codes(strings)
    fractions = torch.bincount(codes, minlength=3).double() / len(strings)
    assert torch.allclose(fractions, torch.tensor([0.9, 0.05, 0.05], dtype=torch.float64), atol=0.01)
    # each code is the same whatever else is hashed with it
    assert torch.equal(hash_split_codes(strings[:100]), codes[:100])
    assert torch.equal(hash_split_codes(strings[::-1])[-100:].flip(0), codes[:100])


def test_adding_a_file_moves_no_old_skeleton(package, tmp_path):
    before = load_rdkit_molecules(tmp_path / "data", cache=False)
    (package / "Data" / "more.smi").write_text("\n".join(f"C1CCC(C{'C' * k})CC1" for k in range(40)))
    after = load_rdkit_molecules(tmp_path / "data", cache=False)
    assert len(after.graphs) == len(before.graphs) + 40

    def split_of(ds):
        from gpse_dgl.train.pretraining.graph_sources import _skeleton_key
        from gpse_dgl.utils.graph import graph_simple_edges

        keys = [_skeleton_key(g.num_nodes(), *graph_simple_edges(g)) for g in ds.graphs]
        return {keys[i]: name for name, idx in ds.splits.items() for i in idx.tolist()}

    old, new = split_of(before), split_of(after)
    assert all(new[key] == name for key, name in old.items())


def test_registered_and_cached(package, tmp_path, monkeypatch):
    assert "rdkit-molecules" in available_datasets()
    ds = load_dataset("rdkit-molecules", root=tmp_path / "data")
    # benzene, cyclobutane, isobutane, methylcyclopropane, pentane, 2 more rings, ethanol's skeleton
    assert len(ds.graphs) == 8 and ds.info["report"]["files_used"] == 4 and ds.info["report"]["cache"] == "written"
    assert sum(len(v) for v in ds.splits.values()) == 8

    def no_scan(*args, **kwargs):
        raise AssertionError("scanned again although the cache is valid")

    monkeypatch.setattr(rdkit_corpus, "scan_rdkit_molecules", no_scan)
    again = load_dataset("rdkit-molecules", root=tmp_path / "data")
    assert again.info["report"]["cache"] == "reused"
    assert all(torch.equal(again.splits[k], ds.splits[k]) for k in ds.splits)
    (package / "Data" / "more.smi").write_text("CCCCCCCC\n")   # a new file invalidates the cache
    with pytest.raises(AssertionError, match="scanned again"):
        load_dataset("rdkit-molecules", root=tmp_path / "data")


def test_pretraining_uses_the_hash_split(package, tmp_path):
    from gpse_dgl.train.pretraining.schema import load_pretrain_recipe
    from gpse_dgl.train.pretraining.graph_sources import subset_and_split

    (package / "Data" / "more.smi").write_text("\n".join(f"C1CCC(C{'C' * k})CC1" for k in range(40)))
    ds = load_dataset("rdkit-molecules", root=tmp_path / "data")
    recipe = load_pretrain_recipe("recipes/quickstart.yaml", ["data.source=rdkit-molecules", "data.split_seed=7"])
    _, codes = subset_and_split(list(ds.graphs), recipe["data"])
    for code, name in enumerate(("train", "val", "test")):
        assert torch.equal(torch.nonzero(codes == code).flatten(), ds.splits[name])


def test_real_rdkit_package_has_the_nci_set():
    names = [p.name for p in find_molecule_files()]
    assert "first_5K.smi" in names


@pytest.mark.slow
def test_real_corpus_is_larger_than_embedded(tmp_path):
    ds = load_rdkit_molecules(tmp_path, cache=False)
    report = ds.info["report"]
    assert report["files_used"] >= 5 and len(ds.graphs) > 10000
    assert any(f["file"].endswith("first_5K.smi") and f["used"] for f in report["files"])


def test_info_prints_the_corpus_size(package, tmp_path, monkeypatch, capsys):
    from test_encode_cli import _run

    monkeypatch.setenv("GPSE_DGL_DATA", str(tmp_path / "data"))
    code, out, _ = _run(["info"], capsys)
    line = next(line for line in out.splitlines() if line.startswith("rdkit-molecules"))
    assert code == 0 and "not scanned yet" in line  # info never runs the scan itself
    load_dataset("rdkit-molecules", root=tmp_path / "data")
    code, out, _ = _run(["info"], capsys)
    line = next(line for line in out.splitlines() if line.startswith("rdkit-molecules"))
    assert code == 0 and "8 unique skeletons (train " in line and "in 4 files" in line
