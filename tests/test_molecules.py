"""Molecule skeletons: canonicalisation, validity, de-duplication, the embedded NCI set."""
import os

import numpy as np
import pytest
import torch

from gpse_dgl.data import molecules as mol
from gpse_dgl.utils.errors import DatasetNotFoundError


def _edge_set(g):
    s, d = g.edges()
    return set(zip(s.tolist(), d.tolist()))


def test_skeleton_smiles_forgets_chemistry():
    assert mol.skeleton_smiles("c1ccccc1") == "C1CCCCC1"
    assert mol.skeleton_smiles("C1=CC=CC=C1") == "C1CCCCC1"
    assert mol.skeleton_smiles("C[C@H](N)O") == mol.skeleton_smiles("CC(C)C")
    assert mol.skeleton_smiles("[NH3+]CC([O-])=O") == mol.skeleton_smiles("CCC(C)C")
    assert mol.skeleton_smiles("[13CH3]O") == "CC"
    # Hypervalent atoms stay valid skeletons (6 bonds on one carbon).
    assert mol.skeleton_smiles("F[P-](F)(F)(F)(F)F") == "CC(C)(C)(C)(C)C"


@pytest.mark.parametrize("bad", ["", "   ", "C1CC", "xyz", "C(C", None, "[Xx]"])
def test_invalid_smiles_gives_none(bad):
    assert mol.skeleton_smiles(bad) is None
    assert mol.smiles_to_skeleton(bad) is None


def test_graph_structure_and_dtype():
    g = mol.smiles_to_skeleton("c1ccccc1O")
    assert g.num_nodes() == 7 and g.num_edges() == 14
    assert g.idtype == torch.int64
    assert len(g.ndata) == 0 and len(g.edata) == 0
    e = _edge_set(g)
    assert all((d, s) in e for s, d in e)
    assert all(s != d for s, d in e)
    deg = np.bincount(g.edges()[0].numpy(), minlength=7)
    assert sorted(deg.tolist()) == [1, 2, 2, 2, 2, 2, 3]


def test_skeleton_graph_from_mol_edge_cases():
    from rdkit import Chem

    assert mol.skeleton_graph_from_mol(Chem.Mol()).num_nodes() == 0
    g = mol.skeleton_graph_from_mol(Chem.MolFromSmiles("C"))
    assert g.num_nodes() == 1 and g.num_edges() == 0


def test_multi_fragment_is_disconnected():
    g = mol.smiles_to_skeleton("CC.O")
    assert g.num_nodes() == 3 and g.num_edges() == 2
    deg = np.bincount(g.edges()[0].numpy(), minlength=3)
    assert sorted(deg.tolist()) == [0, 1, 1]


def test_same_skeleton_same_graph():
    # Node order follows the canonical skeleton SMILES, so equal skeletons give identical graphs.
    g1, g2 = mol.smiles_to_skeleton("OCC(=O)N"), mol.smiles_to_skeleton("NC(C)CO")
    assert mol.skeleton_smiles("OCC(=O)N") == mol.skeleton_smiles("NC(C)CO")
    assert g1.num_nodes() == g2.num_nodes()
    assert _edge_set(g1) == _edge_set(g2)


def test_unique_skeleton_graphs_counts():
    smiles = ["CCO", "CCN", "CCC", "CO", "CN", "not-a-smiles", "", "C", "[Na+].[Cl-]", "CC.O", "c1ccccc1"]
    graphs, stats = mol.unique_skeleton_graphs(smiles)
    # ethanol, ethylamine, propane share one skeleton; methanol and methylamine another.
    assert stats["total"] == 11
    assert stats["invalid"] == 2
    assert stats["too_small"] == 2  # "C" (one node) and "[Na+].[Cl-]" (no bond)
    assert stats["duplicates"] == 3
    assert stats["kept"] == 4 == len(graphs)
    assert stats["total"] == sum(stats[k] for k in ("invalid", "too_small", "duplicates", "kept"))
    assert stats["smiles"] == ["CCC", "CC", "C.CC", "C1CCCCC1"]
    assert [g.num_nodes() for g in graphs] == [3, 2, 3, 6]


def test_min_nodes():
    graphs, stats = mol.unique_skeleton_graphs(["CC", "CCC", "CCCC"], min_nodes=3)
    assert stats["too_small"] == 1 and [g.num_nodes() for g in graphs] == [3, 4]


def test_read_smiles_file(tmp_path):
    p = tmp_path / "mols.smi"
    p.write_text("SMILES\tid\n# a comment\n\nCCO\t1\nc1ccccc1 benzene extra\nCN,7\n  CC  \n")
    assert mol.read_smiles_file(str(p)) == ["CCO", "c1ccccc1", "CN", "CC"]
    p.write_text("CCO 1\nCC 2\n")  # no header: first line kept
    assert mol.read_smiles_file(str(p)) == ["CCO", "CC"]
    with pytest.raises(DatasetNotFoundError):
        mol.read_smiles_file(str(tmp_path / "missing.smi"))


def test_embedded_path_exists():
    path = mol.embedded_smiles_path()
    assert os.path.isfile(path) and path.endswith(os.path.join("NCI", "first_5K.smi"))
    assert len(mol.read_smiles_file(path)) == 4999


def test_embedded_molecules():
    graphs = mol.load_embedded_molecules()
    stats = mol.embedded_stats()
    assert 2900 <= len(graphs) <= 3300
    assert stats["total"] == 4999 and stats["kept"] == len(graphs)
    assert 0 < stats["invalid"] < 50
    smiles = mol.load_embedded_smiles()
    assert len(smiles) == len(graphs) == len(set(smiles))
    # Cached and deterministic.
    again = mol.load_embedded_molecules()
    assert again is not graphs and all(a is b for a, b in zip(again, graphs))
    for g in graphs[:300]:
        assert g.num_nodes() >= 2 and g.num_edges() >= 2
        s, d = g.edges()
        fwd = set(zip(s.tolist(), d.tolist()))
        assert fwd == set(zip(d.tolist(), s.tolist()))
    # The first kept graph matches a fresh conversion of its canonical SMILES.
    ref = mol.smiles_to_skeleton(smiles[0])
    assert _edge_set(ref) == _edge_set(graphs[0])
