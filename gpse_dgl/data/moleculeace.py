"""MoleculeACE: measured bioactivity of 30 ChEMBL targets, with published splits and activity-cliff flags.

MoleculeACE (van Tilborg, Alenicheva and Grisoni, "Exposing the Limitations of Molecular Machine Learning
with Activity Cliffs", *J. Chem. Inf. Model.* 2022, 62, 5938) curated 30 ChEMBL sets of Ki or EC50 values,
615-3,657 molecules each (48,714 in all). Each file ``CHEMBL<id>_<Ki|EC50>.csv`` has the columns

=================  ==========================================================================================
``smiles``         the molecule
``exp_mean [nM]``  the measured activity (mean over ChEMBL records), nM
``y``              the regression target, ``-log10(exp_mean [nM])`` (log units; MoleculeACE's label)
``cliff_mol``      1 when the molecule is in an activity-cliff pair with another molecule of the set
``split``          ``train`` or ``test``, the published split (about 80 / 20, stratified on cliffs)
=================  ==========================================================================================

Datasets are named ``moleculeace:<target>`` (e.g. ``moleculeace:CHEMBL234_Ki``); ``moleculeace`` alone
names the suite (:data:`TARGETS`) and loading it says to name one target. The published test split is the
test split. Validation is carved from the published training split: :data:`VAL_FRACTION` of the cliff and
of the non-cliff training molecules, each drawn by ``numpy.random.default_rng(seed)`` (seed 0 unless the
loader is given another), so validation keeps the training split's share of cliff compounds. The cliff
flag is kept per molecule as the group ``cliff`` (``GraphDataset.groups``): the trainer reports the RMSE
over the cliff molecules of every split beside the RMSE over all (MoleculeACE's "RMSE_cliff": the RMSE over
the test molecules with ``cliff_mol == 1``, :func:`cliff_rmse`).

Where the files are looked for, first hit wins: ``<root>/moleculeace/<target>.csv`` (copy them there on any
machine), then ``MoleculeACE/Data/benchmark_data/`` of the installed ``moleculeace`` package
(``pip install --no-deps moleculeace`` installs the files; they are read without importing the package,
whose imports need TensorFlow and other packages this toolkit does not use). Molecules are featurised as
OGB does (9 atom and 3 bond categorical features).

Example
-------
>>> from gpse_dgl.data.moleculeace import cliff_rmse
>>> round(cliff_rmse([1.0, 2.0, 3.0, 4.0], [1.5, 2.0, 2.0, 4.0], [1, 0, 1, 0]), 4)   # sqrt((0.25 + 1) / 2)
0.7906
"""
from __future__ import annotations

import csv
import importlib.util
import re
from pathlib import Path

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
from ..utils.errors import GPSEError
from ._io import DatasetFormatError, not_found, ogb_smiles_graph
from .dataset import GraphDataset

__all__ = ["SUITE", "TARGETS", "DESIGN_TARGETS", "REPORT_TARGETS", "VAL_FRACTION", "COLUMNS", "INSTALL_HINT",
           "moleculeace_file", "read_moleculeace_csv", "carve_validation", "cliff_rmse", "load_moleculeace"]

SUITE = "moleculeace"
#: The 30 targets of the benchmark, as the wheel names its files.
TARGETS = (
    "CHEMBL1862_Ki", "CHEMBL1871_Ki", "CHEMBL2034_Ki", "CHEMBL2047_EC50", "CHEMBL204_Ki", "CHEMBL2147_Ki",
    "CHEMBL214_Ki", "CHEMBL218_EC50", "CHEMBL219_Ki", "CHEMBL228_Ki", "CHEMBL231_Ki", "CHEMBL233_Ki",
    "CHEMBL234_Ki", "CHEMBL235_EC50", "CHEMBL236_Ki", "CHEMBL237_EC50", "CHEMBL237_Ki", "CHEMBL238_Ki",
    "CHEMBL239_EC50", "CHEMBL244_Ki", "CHEMBL262_Ki", "CHEMBL264_Ki", "CHEMBL2835_Ki", "CHEMBL287_Ki",
    "CHEMBL2971_Ki", "CHEMBL3979_EC50", "CHEMBL4005_Ki", "CHEMBL4203_Ki", "CHEMBL4616_EC50", "CHEMBL4792_Ki",
)
#: Settings are chosen on these ten; the other twenty (:data:`REPORT_TARGETS`) are run once, unchanged.
DESIGN_TARGETS = ("CHEMBL1862_Ki", "CHEMBL2047_EC50", "CHEMBL204_Ki", "CHEMBL218_EC50", "CHEMBL231_Ki",
                  "CHEMBL237_EC50", "CHEMBL262_Ki", "CHEMBL2835_Ki", "CHEMBL3979_EC50", "CHEMBL4616_EC50")
REPORT_TARGETS = tuple(t for t in TARGETS if t not in DESIGN_TARGETS)
VAL_FRACTION = 0.1  # of the published training split, per cliff class
COLUMNS = ("smiles", "exp_mean [nM]", "y", "cliff_mol", "split")
INSTALL_HINT = ("`pip install --no-deps moleculeace` installs the files (nothing else is needed), or copy them "
                "to {where}")
_TARGET = re.compile(r"^CHEMBL\d+_(Ki|EC50)$")


def _package_dir() -> Path | None:
    spec = importlib.util.find_spec("MoleculeACE")  # locates the package without importing it
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "Data" / "benchmark_data"


def _canonical_target(target: str) -> str:
    """``chembl234_ki`` -> ``CHEMBL234_Ki`` (dataset names are matched case-insensitively)."""
    text = str(target).strip()
    for known in TARGETS:
        if known.lower() == text.lower():
            return known
    head, _, kind = text.partition("_")
    kind = {"ki": "Ki", "ec50": "EC50"}.get(kind.lower(), kind)
    return f"{head.upper()}_{kind}"


def moleculeace_file(target: str, root=None) -> Path:
    """The CSV of ``target`` (module docstring for the search order), or a one-line
    :class:`~gpse_dgl.utils.errors.DatasetNotFoundError` naming the install command."""
    if not target:
        raise GPSEError(f"dataset {SUITE!r} is a suite of {len(TARGETS)} targets: name one, e.g. "
                        f"{SUITE}:CHEMBL234_Ki (targets: {', '.join(TARGETS)})")
    name = _canonical_target(target)
    if not _TARGET.match(name):
        raise GPSEError(f"{SUITE}: {target!r} is not a target name like CHEMBL234_Ki; targets: {', '.join(TARGETS)}")
    own = Path(root) / SUITE if root is not None else None
    package = _package_dir()
    for folder in [f for f in (own, package) if f is not None]:
        if (folder / f"{name}.csv").is_file():
            return folder / f"{name}.csv"
    if package is not None and package.is_dir():  # the package is there, the target is not one of its
        raise GPSEError(f"{SUITE}: no target {name!r} in {package}; targets: {', '.join(TARGETS)}")
    where = own / f"{name}.csv" if own else f"{name}.csv"
    raise not_found(f"{SUITE}:{name}", where, INSTALL_HINT.format(where=own or f"<root>/{SUITE}"))


def read_moleculeace_csv(path: Path) -> dict:
    """The columns of one MoleculeACE file: ``smiles`` (list), ``y`` (float64), ``cliff`` (bool) and
    ``test`` (bool, the published split); a malformed file is a one-line error naming it."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or not set(COLUMNS) <= set(rows[0]):
        raise DatasetFormatError(f"{path}: expected the columns {', '.join(COLUMNS)}")
    try:
        y = np.array([float(row["y"]) for row in rows])
        cliff = np.array([int(row["cliff_mol"]) for row in rows]) == 1
    except ValueError as exc:
        raise DatasetFormatError(f"{path}: {exc}") from exc
    splits = {row["split"] for row in rows}
    if not splits <= {"train", "test"}:
        raise DatasetFormatError(f"{path}: column split holds {sorted(splits - {'train', 'test'})}, "
                                 f"expected train or test")
    return {"smiles": [row["smiles"] for row in rows], "y": y, "cliff": cliff,
            "test": np.array([row["split"] == "test" for row in rows])}


def carve_validation(train: np.ndarray, cliff: np.ndarray, fraction: float = VAL_FRACTION,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Split the indices ``train`` into (train, val): ``round(fraction * n)`` of the cliff and of the other
    molecules each go to validation, drawn by ``numpy.random.default_rng(seed)``; both sorted."""
    rng = np.random.default_rng(seed)
    val = []
    for members in (train[cliff[train]], train[~cliff[train]]):
        take = int(round(fraction * len(members)))
        val.append(rng.choice(members, size=take, replace=False) if take else members[:0])
    val = np.sort(np.concatenate(val))
    return np.setdiff1d(train, val), val


def cliff_rmse(y_true, y_pred, cliff) -> float:
    """RMSE over the molecules flagged as activity cliffs (MoleculeACE's ``calc_cliff_rmse`` with the
    dataset's ``cliff_mol`` column); NaN when none is flagged."""
    y_true, y_pred = np.asarray(y_true, dtype=np.float64).ravel(), np.asarray(y_pred, dtype=np.float64).ravel()
    cliff = np.asarray(cliff).ravel().astype(bool)
    if not cliff.any():
        return float("nan")
    return float(np.sqrt(np.mean((y_true[cliff] - y_pred[cliff]) ** 2)))


def load_moleculeace(root=None, target: str = "", seed: int = 0, val_fraction: float = VAL_FRACTION) -> GraphDataset:
    """One MoleculeACE target (module docstring): OGB-featurised graphs, ``y`` in log units, RMSE.

    Parameters
    ----------
    root : path-like, optional
        Datasets root; ``<root>/moleculeace/<target>.csv`` is read before the installed package's file.
    target : str
        ``CHEMBL<id>_<Ki|EC50>``, one of :data:`TARGETS`.
    seed : int
        Seed of the validation draw from the training split.
    val_fraction : float
        Share of each cliff class of the training split that goes to validation.
    """
    path = moleculeace_file(target, root)
    table = read_moleculeace_csv(path)
    graphs = []
    for index, text in enumerate(table["smiles"]):
        graph = ogb_smiles_graph(text)
        if graph is None:
            raise DatasetFormatError(f"{path}: row {index + 1}: RDKit cannot parse {text!r}")
        graphs.append(graph)
    train, val = carve_validation(np.flatnonzero(~table["test"]), table["cliff"], val_fraction, seed)
    splits = {"train": torch.from_numpy(train), "val": torch.from_numpy(val),
              "test": torch.from_numpy(np.flatnonzero(table["test"]))}
    return GraphDataset(
        graphs=graphs, labels=torch.tensor(table["y"], dtype=torch.float32).reshape(-1, 1), splits=splits,
        name=f"{SUITE}:{path.stem}", task="graph", task_type="regression", metric="rmse", num_tasks=1,
        node_feat_key="feat", edge_feat_key="feat", groups={"cliff": torch.from_numpy(table["cliff"])},
        info={"source": str(path), "target": "-log10(exp_mean [nM]) (MoleculeACE's y)", "smiles": table["smiles"],
              "node_feat_kind": "ogb-atom", "edge_feat_kind": "ogb-bond",
              "validation": f"{val_fraction:g} of each cliff class of the published train split, "
                            f"numpy default_rng({seed})"})
