"""Train / val / test splits: of user data (``random``, ``scaffold`` or ``column:<name>``), and the
stratified k-fold cross-validation of CSL and EXP (:func:`stratified_kfold`).

* ``random``: a seeded permutation cut 80 / 10 / 10 (:func:`gpse_dgl.data.dataset.random_split`).
* ``scaffold``: molecules grouped by their Bemis-Murcko scaffold (RDKit, chirality ignored); groups
  are placed largest first into train until it holds 80 %, then val until 90 %, the rest in test (the
  deterministic scaffold split of OGB / MoleculeNet). Molecules of one scaffold never straddle splits.
* ``column:<name>``: one value per item in the named column: ``train``, ``val`` (or ``valid``,
  ``validation``) or ``test``, case-insensitive; or the codes 0 / 1 / 2.

Example
-------
>>> from gpse_dgl.data.splits import scaffold_split, column_split
>>> sorted(len(v) for v in scaffold_split(["c1ccccc1O", "c1ccccc1N", "C1CC1", "CCO"]).values())
[0, 1, 3]
>>> column_split(["train", "test", "valid"], "fold")["val"].tolist()
[2]
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..utils.errors import GPSEError
from .dataset import random_split

__all__ = ["SPLIT_NAMES", "FRACTIONS", "parse_split", "make_split", "scaffold_split", "column_split",
           "stratified_kfold"]

SPLIT_NAMES = ("train", "val", "test")
FRACTIONS = (0.8, 0.1, 0.1)
_CODES = {"train": 0, "val": 1, "valid": 1, "validation": 1, "test": 2, "0": 0, "1": 1, "2": 2}


def parse_split(text: str) -> tuple[str, str | None]:
    """``"random"`` -> ``("random", None)``, ``"column:fold"`` -> ``("column", "fold")``; else a one-line error."""
    text = str(text).strip()
    if text in ("random", "scaffold"):
        return text, None
    if text.startswith("column:") and text[len("column:"):].strip():
        return "column", text[len("column:"):].strip()
    raise GPSEError(f"data.split: expected random, scaffold or column:<name>, got {text!r}")


def make_split(kind: str, num_items: int, seed: int = 0, smiles: Sequence[str] | None = None,
               column: Sequence | None = None) -> dict[str, torch.Tensor]:
    """Index splits of ``num_items`` items of the given ``kind`` (see the module docstring)."""
    if kind == "random":
        return random_split(num_items, FRACTIONS, seed=seed, names=SPLIT_NAMES)
    if kind == "scaffold":
        if smiles is None:
            raise GPSEError("data.split: scaffold needs molecules (data.name: csv); use random or column:<name>")
        return scaffold_split(smiles)
    return column_split(column, "split column")


def _scaffold(smiles: str) -> str:
    from rdkit import Chem  # rdkit: a heavy import, for molecules only
    from rdkit.Chem.Scaffolds import MurckoScaffold

    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return smiles
    return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)


def scaffold_split(smiles: Sequence[str], fractions=FRACTIONS) -> dict[str, torch.Tensor]:
    """Deterministic Bemis-Murcko scaffold split (module docstring); molecules without rings share ``""``."""
    groups: dict[str, list[int]] = {}
    for index, text in enumerate(smiles):
        groups.setdefault(_scaffold(text), []).append(index)
    # Largest groups first, ties by first occurrence: the same input always gives the same split.
    ordered = sorted(groups.values(), key=lambda members: (-len(members), members[0]))
    bounds = np.cumsum(fractions)[:-1] * len(smiles)
    parts: dict[str, list[int]] = {name: [] for name in SPLIT_NAMES}
    for members in ordered:
        placed = len(parts["train"]) + len(parts["val"])
        if len(parts["train"]) + len(members) <= bounds[0]:
            parts["train"] += members
        elif placed + len(members) <= bounds[1]:
            parts["val"] += members
        else:
            parts["test"] += members
    return {name: torch.tensor(sorted(idx), dtype=torch.long) for name, idx in parts.items()}


def column_split(values: Sequence, where: str) -> dict[str, torch.Tensor]:
    """Splits from one value per item (``train`` / ``val`` / ``test`` or 0 / 1 / 2); ``where`` names the
    column in errors."""
    codes = []
    for index, value in enumerate(values):
        text = str(value).strip().lower()
        if text.endswith(".0"):
            text = text[:-2]
        if text not in _CODES:
            raise GPSEError(f"{where}: row {index}: expected train, val, test (or 0, 1, 2), got {value!r}")
        codes.append(_CODES[text])
    codes = np.asarray(codes, dtype=np.int64)
    return {name: torch.from_numpy(np.flatnonzero(codes == k)).long() for k, name in enumerate(SPLIT_NAMES)}


def stratified_kfold(labels, k: int = 5, seed: int = 0, val: bool = True) -> list[dict[str, torch.Tensor]]:
    """Stratified k-fold cross-validation splits (numpy only, seeded).

    Each class's items are shuffled and dealt round-robin to the k folds, continuing where the previous
    class stopped so fold sizes differ by at most one. Fold ``i`` is the test set of split ``i``; with
    ``val=True`` fold ``(i + 1) % k`` is its validation set (the benchmarking-gnns CSL protocol), and the
    remaining folds are training data.

    Parameters
    ----------
    labels : array-like of int, shape (n,)
        Class of each item.
    k : int
        Number of folds (>= 2, or >= 3 with ``val``).
    seed : int
        Shuffling seed.
    val : bool
        Whether to hold out a validation fold.

    Returns
    -------
    list of dict
        ``k`` dicts with sorted LongTensors ``"train"``, ``"test"`` (and ``"val"``), together a partition
        of ``range(n)``.
    """
    y = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels).reshape(-1)
    if k < (3 if val else 2):
        raise ValueError(f"k={k} folds is too few")
    rng = np.random.default_rng(seed)
    fold_of = np.empty(len(y), dtype=np.int64)
    start = 0
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        fold_of[idx] = (start + np.arange(len(idx))) % k
        start = (start + len(idx)) % k
    folds = []
    for i in range(k):
        test = fold_of == i
        valid = (fold_of == (i + 1) % k) if val else np.zeros_like(test)
        parts = {"train": ~(test | valid), "test": test}
        if val:
            parts["val"] = valid
        folds.append({name: torch.from_numpy(np.flatnonzero(m)).long() for name, m in parts.items()})
    return folds
