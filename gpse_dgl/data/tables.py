"""Molecule tables: SMILES plus other columns from CSV / TSV, SMILES files and SD files.

:func:`read_molecule_table` returns a :class:`MoleculeTable`: one entry per record of the file, in file
order, numbered from 0 (the header line of a CSV is not a record), so an index reported for an invalid
molecule is the index a user finds in ``smiles_index`` and in a dataframe read from the same file.

=====================  =============================================================================
``.csv``, ``.tsv``     a header line, then one molecule per line; the SMILES column is
``.tab``               ``smiles_column`` (default: the column called ``smiles`` in any case, else the
                       first); the delimiter is a tab for ``.tsv`` / ``.tab``, else sniffed among
                       ``,`` ``;`` and tab
``.sdf`` (``.sdf.gz``)  RDKit's SD reader; SMILES written by RDKit, every SD property is a column
anything else          a SMILES file (:func:`gpse_dgl.data.molecules.read_smiles_file`: first column,
                       no other columns), unless ``smiles_column`` is given (then read as a CSV)
=====================  =============================================================================

:meth:`MoleculeTable.numeric_columns` gives the columns whose every non-empty value is a number, as
float32 tensors with NaN for empty cells: the labels kept by ``gpse-dgl encode --smiles`` and the
targets of ``data.name: csv`` recipes. :meth:`MoleculeTable.text_columns` names the others with their
first record that is not a number, so that a column left out is reported, never dropped silently.

Example
-------
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "mols.csv")
>>> _ = open(path, "w").write("name,smiles,logp\\na,CCO,-0.1\\nb,c1ccccc1,1.7\\n")
>>> table = read_molecule_table(path)
>>> table.smiles, sorted(table.numeric_columns()), table.text_columns()
(['CCO', 'c1ccccc1'], ['logp'], {'name': (0, 'a')})
>>> records_note([2, 7])
'records 2, 7, numbered from 0'
"""
from __future__ import annotations

import csv
import gzip
import os
from dataclasses import dataclass, field

import torch

from ..utils.errors import DatasetNotFoundError
from ._io import DatasetFormatError

__all__ = ["MoleculeTable", "read_molecule_table", "skeleton_table", "records_note", "columns_note",
           "TABLE_SUFFIXES", "SDF_SUFFIXES"]

TABLE_SUFFIXES = (".csv", ".tsv", ".tab")
SDF_SUFFIXES = (".sdf", ".sdf.gz")


@dataclass
class MoleculeTable:
    """SMILES and other columns of a molecule file, one entry per record (see the module docstring).

    ``smiles[i]`` is None for a record RDKit could not read (SD files only; invalid SMILES strings are
    kept as text and found invalid when parsed).
    """

    path: str
    smiles: list
    columns: dict = field(default_factory=dict)
    smiles_column: str | None = None

    def __len__(self) -> int:
        return len(self.smiles)

    def column(self, name: str) -> list:
        """Values of one column; a one-line error naming the file and the column when it is absent."""
        if name not in self.columns:
            raise DatasetFormatError(f"{self.path}: no column {name!r} (columns: {', '.join(self.columns) or 'none'})")
        return self.columns[name]

    def numeric_columns(self, names=None) -> dict[str, torch.Tensor]:
        """``{name: float32 (records,)}`` of the numeric columns (``names``: these, each must be numeric)."""
        out = {}
        for name in (self.columns if names is None else names):
            values = _floats(self.column(name))
            if values is None:
                if names is not None:
                    bad, value = self.text_columns()[name]
                    raise DatasetFormatError(f"{self.path}: column {name!r}, record {bad}: {value!r} is not a number")
                continue
            out[name] = values
        return out

    def text_columns(self) -> dict[str, tuple[int, str]]:
        """``{name: (record, value)}`` of the columns :meth:`numeric_columns` leaves out: the first record
        (numbered from 0) whose value is not a number."""
        out = {}
        for name, values in self.columns.items():
            bad = next((i for i, v in enumerate(values) if _float(v) is None), None)
            if bad is not None:
                out[name] = (bad, str(values[bad]))
        return out


def records_note(records, limit: int = 10) -> str:
    """``"records 2, 7, numbered from 0"``: the first ``limit`` of ``records``, then how many more."""
    shown = ", ".join(str(i) for i in records[:limit])
    more = f" and {len(records) - limit} more" if len(records) > limit else ""
    return f"{'record' if len(records) == 1 else 'records'} {shown}{more}, numbered from 0"


def columns_note(text_columns: dict) -> str:
    """``"name (record 0: 'a'), y (record 15: 'abc')"``: columns left out and why, for a one-line report."""
    return ", ".join(f"{name} (record {i}: {value[:20]!r})" for name, (i, value) in text_columns.items())


def _float(value):
    text = "" if value is None else str(value).strip()
    if text == "" or text.lower() in ("nan", "na", "n/a"):
        return float("nan")
    try:
        return float(text)
    except ValueError:
        return None


def _floats(values) -> torch.Tensor | None:
    parsed = [_float(v) for v in values]
    if any(v is None for v in parsed):
        return None
    return torch.tensor(parsed, dtype=torch.float32)


def read_molecule_table(path, smiles_column: str | None = None) -> MoleculeTable:
    """Read a CSV / TSV, SD or SMILES file into a :class:`MoleculeTable` (see the module docstring)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DatasetNotFoundError(f"molecule file not found: {path}")
    lower = path.lower()
    if lower.endswith(SDF_SUFFIXES):
        return _read_sdf(path)
    if lower.endswith(TABLE_SUFFIXES) or smiles_column is not None:
        return _read_csv(path, smiles_column)
    from .molecules import read_smiles_file  # rdkit (through .molecules): a heavy import

    return MoleculeTable(path, list(read_smiles_file(path)))


def _dialect(path: str, sample: str):
    if path.lower().endswith((".tsv", ".tab")):
        return "excel-tab"
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t")
    except csv.Error:
        return "excel"


def _read_csv(path: str, smiles_column: str | None) -> MoleculeTable:
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
        sample = fh.read(1 << 16)
        fh.seek(0)
        rows = [row for row in csv.reader(fh, _dialect(path, sample)) if any(cell.strip() for cell in row)]
    if not rows:
        raise DatasetFormatError(f"{path}: empty file (expected a header line, then one molecule per line)")
    header = [name.strip() for name in rows[0]]
    if smiles_column is None:
        smiles_column = next((name for name in header if name.lower() == "smiles"), header[0])
    elif smiles_column not in header:
        raise DatasetFormatError(f"{path}: no column {smiles_column!r} (columns: {', '.join(header)})")
    records = rows[1:]
    short = next((i for i, row in enumerate(records) if len(row) < len(header)), None)
    if short is not None:
        raise DatasetFormatError(f"{path}: record {short} has {len(records[short])} fields, the header "
                                 f"{len(header)}")
    columns = {name: [row[j].strip() for row in records] for j, name in enumerate(header)}
    smiles = columns.pop(smiles_column)
    return MoleculeTable(path, smiles, columns, smiles_column)


def _read_sdf(path: str) -> MoleculeTable:
    from rdkit import Chem  # rdkit: a heavy import, for molecules only

    from .molecules import quiet_rdkit  # rdkit (through .molecules): a heavy import

    opener = gzip.open if path.lower().endswith(".gz") else open
    smiles, properties = [], []
    with quiet_rdkit(), opener(path, "rb") as fh:
        for mol in Chem.ForwardSDMolSupplier(fh):
            smiles.append(None if mol is None else Chem.MolToSmiles(mol))
            properties.append({} if mol is None else mol.GetPropsAsDict())
    names = list(dict.fromkeys(name for props in properties for name in props))
    columns = {name: [props.get(name, "") for props in properties] for name in names}
    return MoleculeTable(path, smiles, columns)


def skeleton_table(path, smiles_column: str | None = None) -> tuple[list, dict[str, torch.Tensor], list[int], dict]:
    """Skeleton graphs of a molecule file (:func:`gpse_dgl.data.molecules.smiles_to_skeleton`), their labels,
    the records skipped as invalid and the columns left out.

    Returns
    -------
    graphs : list of DGLGraph
        One per valid record, in file order.
    labels : dict of str to Tensor
        ``smiles_index`` (int64: the record of each graph) and every numeric column (float32, rows
        aligned with ``graphs``).
    invalid : list of int
        Records (0-based, as ``smiles_index``) whose SMILES RDKit could not read.
    text_columns : dict
        :meth:`MoleculeTable.text_columns`: the columns that are not labels, each with its first record
        that is not a number.
    """
    from .molecules import smiles_to_skeleton  # rdkit (through .molecules): a heavy import

    table = read_molecule_table(path, smiles_column)
    graphs, kept, invalid = [], [], []
    for index, text in enumerate(table.smiles):
        graph = smiles_to_skeleton(text) if text else None
        if graph is None:
            invalid.append(index)
        else:
            graphs.append(graph)
            kept.append(index)
    rows = torch.tensor(kept, dtype=torch.int64)
    labels = {"smiles_index": rows}
    labels.update({name: values[rows] for name, values in table.numeric_columns().items() if name not in labels})
    return graphs, labels, invalid, table.text_columns()
